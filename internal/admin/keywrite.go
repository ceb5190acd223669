package admin

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/ledger"
)

// The admin API's writes of a key (docs/keys-and-teams.md) are each one conditional
// write on the key's version: a write based on a version another write
// replaced changes nothing, so two admin calls racing — on one replica or
// two — never lose each other's change, and a revocation is final. GET
// answers the version as an ETag; PATCH, rotate and DELETE honour
// If-Match.

// keyWriteTries bounds how often a change is applied again to a key that
// another write changed meanwhile, before it answers 409 key_conflict.
const keyWriteTries = 8

// etagOf is key k's entity tag: its version, quoted (RFC 9110 §8.8.3).
func etagOf(k *ledger.Key) string { return versionTag(k.Version) }

// versionTag is the entity tag of a key's or a team's version.
func versionTag(v int64) string { return `"v` + strconv.FormatInt(v, 10) + `"` }

// precondition is what an If-Match header asks (RFC 9110 §13.1.1).
type precondition struct {
	set      bool           // the header was sent
	any      bool           // "*": any version of an existing key
	versions map[int64]bool // the versions its entity tags name
}

// holds reports whether a key at version passes the precondition.
func (p precondition) holds(version int64) bool {
	return !p.set || p.any || p.versions[version]
}

// ifMatch reads r's If-Match header. Only strong tags of ours compare
// (a weak tag or a stranger's never matches, as the RFC's strong
// comparison says); a header that is no list of tags is a 400.
func ifMatch(r *http.Request) (precondition, *api.Error) {
	vals := r.Header.Values("If-Match")
	if len(vals) == 0 {
		return precondition{}, nil
	}
	p := precondition{set: true, versions: map[int64]bool{}}
	for _, v := range vals {
		for tag := range strings.SplitSeq(v, ",") {
			tag = strings.TrimSpace(tag)
			weak := strings.HasPrefix(tag, "W/")
			opaque := strings.TrimPrefix(tag, "W/")
			switch {
			case tag == "": // an empty list element
			case tag == "*":
				p.any = true
			case len(opaque) >= 2 && opaque[0] == '"' && opaque[len(opaque)-1] == '"':
				n, ours := strings.CutPrefix(opaque[1:len(opaque)-1], "v")
				if v, err := strconv.ParseInt(n, 10, 64); ours && !weak && err == nil {
					p.versions[v] = true
				}
			default:
				return p, &api.Error{Code: api.CodeInvalidRequest, Param: "If-Match", Message: fmt.Sprintf("If-Match: %q is not an entity tag (the ETag a GET answered, such as \"v3\")", tag)}
			}
		}
	}
	return p, nil
}

// keyWrite applies change to the key {id} and writes it, conditional on
// the version it read: when another write came in between, it reads the
// key again and applies change again (so concurrent changes of different
// fields each keep theirs), at most keyWriteTries times. A revoked key is
// 409 key_revoked; an If-Match the key's version does not pass, 412.
// change may refuse with its own error, which is answered as it is.
func (a *API) keyWrite(r *http.Request, change func(k *ledger.Key) *api.Error) (*ledger.Key, *api.Error) {
	cond, e := ifMatch(r)
	if e != nil {
		return nil, e
	}
	id := r.PathValue("id")
	for range keyWriteTries {
		k, e := a.readStoredKey(r, id)
		if e != nil {
			return nil, e
		}
		switch {
		case k.Revoked():
			return nil, revokedError(id)
		case !cond.holds(k.Version):
			return nil, preconditionError(id, k)
		}
		if e := change(k); e != nil {
			return nil, e
		}
		err := a.store.UpdateKey(r.Context(), k)
		switch {
		case err == nil:
			return k, nil
		case errors.Is(err, ledger.ErrConflict):
			continue // changed meanwhile: read it again
		case errors.Is(err, ledger.ErrKeyRevoked):
			return nil, revokedError(id)
		case errors.Is(err, ledger.ErrNotFound):
			return nil, api.Errorf(api.CodeNotFound, "no key %q", id)
		}
		return nil, api.StoreUnavailable(err)
	}
	return nil, api.Errorf(api.CodeKeyConflict, "key %s kept changing while this change was applied (%d tries); read it and try again", id, keyWriteTries)
}

// revoke revokes the key {id} in one conditional write. Without If-Match
// it is revoked whatever its version — nothing to read first, nothing to
// lose; with one, at the version read if that passes (412 otherwise). A
// key revoked already is answered as revoked: a revocation is final and
// its time stays the first one's.
func (a *API) revoke(r *http.Request) (*ledger.Key, *api.Error) {
	cond, e := ifMatch(r)
	if e != nil {
		return nil, e
	}
	id := r.PathValue("id")
	now := a.clock.Now().UTC()
	for range keyWriteTries {
		var version int64
		if cond.set {
			k, e := a.readStoredKey(r, id)
			switch {
			case e != nil:
				return nil, e
			case k.Revoked():
				return k, nil
			case !cond.holds(k.Version):
				return nil, preconditionError(id, k)
			}
			version = k.Version
		}
		k, err := a.store.RevokeKey(r.Context(), id, version, now)
		switch {
		case err == nil:
			return k, nil
		case errors.Is(err, ledger.ErrConflict):
			continue // changed since it passed If-Match: check again
		case errors.Is(err, ledger.ErrKeyRevoked):
			return a.readStoredKey(r, id)
		case errors.Is(err, ledger.ErrNotFound):
			return nil, api.Errorf(api.CodeNotFound, "no key %q", id)
		}
		return nil, api.StoreUnavailable(err)
	}
	return nil, api.Errorf(api.CodeKeyConflict, "key %s kept changing while it was revoked (%d tries); try again", id, keyWriteTries)
}

// readStoredKey reads key id: 404 when there is none.
func (a *API) readStoredKey(r *http.Request, id string) (*ledger.Key, *api.Error) {
	k, err := a.store.Key(r.Context(), id)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, api.Errorf(api.CodeNotFound, "no key %q", id)
	}
	if err != nil {
		return nil, api.StoreUnavailable(err)
	}
	return k, nil
}

func revokedError(id string) *api.Error {
	return api.Errorf(api.CodeKeyRevoked, "key %s is revoked, which is final: issue a new key", id)
}

func preconditionError(id string, k *ledger.Key) *api.Error {
	return api.Errorf(api.CodePreconditionFailed, "If-Match does not match key %s, now at %s: read it again", id, etagOf(k))
}
