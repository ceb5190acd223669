package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// adminKey is the soak's admin key (admin_key_env: CHAOS_ADMIN_KEY).
const adminKey = "sk-chaos-admin"

// revocationBound is how soon a revocation must hold on every replica
// (docs/keys-and-teams.md): a request that starts later than this after a DELETE
// was answered 204 must be refused.
const revocationBound = time.Second

// keyChurn issues virtual keys of the tenant chaos and races admin writes
// against each other and against requests, on random gateways, while
// the soak runs: for each key, requests with its secret, two PATCHes of
// different fields, a rotation and a DELETE, all at once; then, once the
// revocation's bound has passed, a request with every secret the key
// ever had. Afterwards check asks every gateway, with every secret of
// every revoked key, once more.
type keyChurn struct {
	pick func() string

	mu   sync.Mutex
	keys []*churnKey
	// late are the requests made with a revoked key's secret past the
	// revocation's bound, and what each was answered.
	late []lateUse
	wg   sync.WaitGroup
}

// churnKey is one issued key and what its admin writes did.
type churnKey struct {
	id      string
	secrets []string  // every secret it was issued or rotated to
	revoked time.Time // when a DELETE's 204 reached the client; zero: none did
}

// lateUse is one request with a revoked key's secret, started past the
// revocation's bound; authenticated says its answer showed it was let in
// (a 200, or a logical request id).
type lateUse struct {
	key, where    string
	status        int
	authenticated bool
}

// run churns keys until ctx ends or stop is closed.
func (k *keyChurn) run(ctx context.Context, stop <-chan struct{}) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		k.round(ctx, n)
		if !pause(ctx, 50*time.Millisecond) {
			return
		}
	}
}

// round is one key's life: issued, used, changed, rotated and revoked at
// once, then probed past the bound.
func (k *keyChurn) round(ctx context.Context, n int) {
	status, body := k.admin(ctx, "POST", "/admin/keys", fmt.Sprintf(`{"tenant":"chaos","name":"churn-%d","models":["chat"]}`, n))
	if status != http.StatusCreated {
		return // a gateway was killed under it, or none was up
	}
	var issued struct{ ID, Key string }
	if json.Unmarshal(body, &issued) != nil || issued.ID == "" {
		return
	}
	key := &churnKey{id: issued.ID, secrets: []string{issued.Key}}
	k.mu.Lock()
	k.keys = append(k.keys, key)
	k.mu.Unlock()

	start := make(chan struct{})
	var wg sync.WaitGroup
	race := func(f func()) { wg.Go(func() { <-start; f() }) }
	for u := range 2 {
		race(func() {
			k.chat(ctx, issued.Key, fmt.Sprintf("Chaos key churn %d, request %d.", n, u))
		})
	}
	race(func() { k.admin(ctx, "PATCH", "/admin/keys/"+issued.ID, fmt.Sprintf(`{"metadata":{"round":"%d"}}`, n)) })
	race(func() { k.admin(ctx, "PATCH", "/admin/keys/"+issued.ID, fmt.Sprintf(`{"name":"churn-%d-renamed"}`, n)) })
	race(func() {
		grace := []string{"0s", "1s"}[n%2]
		status, body := k.admin(ctx, "POST", "/admin/keys/"+issued.ID+"/rotate", `{"grace":"`+grace+`"}`)
		var rotated struct{ Key string }
		if status == http.StatusOK && json.Unmarshal(body, &rotated) == nil && rotated.Key != "" {
			k.mu.Lock()
			key.secrets = append(key.secrets, rotated.Key)
			k.mu.Unlock()
		}
	})
	race(func() { k.revoke(ctx, key) })
	close(start)
	wg.Wait()
	// A DELETE a kill cut short is sent again, a few times.
	for try := 2; k.revokedAt(key).IsZero() && try <= 5 && ctx.Err() == nil; try++ {
		k.revoke(ctx, key)
	}
	if at := k.revokedAt(key); !at.IsZero() {
		k.wg.Go(func() { k.probeLate(ctx, key, at) })
	}
}

// revokedAt is when key's revocation was answered (zero: not yet).
func (k *keyChurn) revokedAt(key *churnKey) time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return key.revoked
}

// revoke sends DELETE and, on 204, records when the answer arrived.
func (k *keyChurn) revoke(ctx context.Context, key *churnKey) {
	if status, _ := k.admin(ctx, "DELETE", "/admin/keys/"+key.id, ""); status == http.StatusNoContent {
		k.mu.Lock()
		if key.revoked.IsZero() {
			key.revoked = time.Now()
		}
		k.mu.Unlock()
	}
}

// probeLate waits out the revocation's bound, then sends a request with
// each of the key's secrets to a random gateway.
func (k *keyChurn) probeLate(ctx context.Context, key *churnKey, revoked time.Time) {
	t := time.NewTimer(time.Until(revoked.Add(revocationBound)))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return
	}
	k.mu.Lock()
	secrets := append([]string(nil), key.secrets...)
	k.mu.Unlock()
	for _, s := range secrets {
		status, authenticated, err := k.chat(ctx, s, "Chaos key churn: a revoked key.")
		if err != nil {
			continue // a kill: no answer to judge
		}
		k.mu.Lock()
		k.late = append(k.late, lateUse{key: key.id, where: "during the run", status: status, authenticated: authenticated})
		k.mu.Unlock()
	}
}

// chat sends one keyless chat request with secret to a random gateway;
// authenticated says the answer shows the secret was let in.
func (k *keyChurn) chat(ctx context.Context, secret, prompt string) (status int, authenticated bool, err error) {
	base := k.pick()
	if base == "" {
		return 0, false, fmt.Errorf("no gateway is up")
	}
	body := fmt.Sprintf(`{"model":"chat","messages":[{"role":"user","content":%s}]}`, strconv.Quote(prompt))
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", bytes.NewReader([]byte(body)))
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Oncegate-Join", "off")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode, res.StatusCode == http.StatusOK || res.Header.Get("X-Oncegate-Request-Id") != "", nil
}

// admin sends an admin request to a random gateway; status 0 when none
// answered.
func (k *keyChurn) admin(ctx context.Context, method, path, body string) (int, []byte) {
	base := k.pick()
	if base == "" {
		return 0, nil
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader([]byte(body)))
	if err != nil {
		return 0, nil
	}
	req.Header.Set("Authorization", "Bearer "+adminKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// check waits for the late probes, then asks every gateway with every
// secret of every revoked key (GET /v1/models: authenticated, no
// provider) and fills the invariant's row.
func (k *keyChurn) check(ctx context.Context, gws []*gateway, example func(string, ...any)) Row {
	k.wg.Wait()
	row := Row{Invariant: "no key revoked by an answered DELETE authenticates again"}
	k.mu.Lock()
	defer k.mu.Unlock()
	revoked, unanswered, secrets := 0, 0, 0
	for _, key := range k.keys {
		if key.revoked.IsZero() {
			unanswered++
			continue
		}
		revoked++
		for _, s := range key.secrets {
			secrets++
			for i, g := range gws {
				status := getModels(ctx, g.url(), s)
				if status == 0 {
					continue
				}
				row.Checked++
				if status != http.StatusUnauthorized {
					row.Violations++
					example("key %s, revoked %v ago: its secret %s… answered %d on gateway %d after the run", key.id,
						time.Since(key.revoked).Round(time.Millisecond), s[:min(len(s), 10)], status, i)
				}
			}
		}
	}
	for _, u := range k.late {
		row.Checked++
		if u.authenticated {
			row.Violations++
			example("key %s: a request %v past its revocation was let in (%d) %s", u.key, revocationBound, u.status, u.where)
		}
	}
	row.Note = fmt.Sprintf("%d keys issued, each raced by requests, two PATCHes, a rotation and a DELETE; %d revoked with %d secrets, %d requests past the bound during the run; %d never revoked (every DELETE cut by a kill)",
		len(k.keys), revoked, secrets, len(k.late), unanswered)
	return row
}

// getModels asks base for the models under secret; 0 when it could not
// be asked.
func getModels(ctx context.Context, base, secret string) int {
	if base == "" {
		return 0
	}
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/models", nil)
	if err != nil {
		return 0
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode
}
