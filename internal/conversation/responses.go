package conversation

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/identity"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
)

// The routes' handlers: a turn taken in, found again when it is a retry
// of one, and the stored responses read, deleted and listed.

// newResponseID names a new turn's response.
func newResponseID() string {
	return "resp_og" + strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", "")
}

// turnError answers a turn refused before any logical request.
func (s *Service) turnError(w http.ResponseWriter, e *api.Error) {
	e.Write(w, provider.Responses, api.Meta{})
}

// ServeResponses handles POST /v1/responses: one turn of a conversation.
// The turn is written (pending) before anything is sent; a retry of it —
// the same Idempotency-Key, or the same body on the same parent while it
// is in flight or within the replay windows — finds it and continues it,
// never appending a copy. Any other turn on a response is a new branch of
// the conversation: one turn per user action, however many per response.
func (s *Service) ServeResponses(w http.ResponseWriter, r *http.Request) {
	t, release, apiErr := s.path.Enter(r)
	if apiErr != nil {
		s.turnError(w, apiErr)
		return
	}
	defer release()
	key, body, apiErr := s.path.ReadRequest(w, r)
	if apiErr != nil {
		s.turnError(w, apiErr)
		return
	}
	req, err := provider.ParseResponsesRequest(body)
	if err != nil {
		s.turnError(w, api.InvalidRequest(err))
		return
	}
	s.path.NoteModel(r, req.Model)
	if req.Conversation != "" {
		s.turnError(w, &api.Error{Code: api.CodeInvalidRequest, Param: "conversation",
			Message: "conversation objects are not supported: continue a conversation with previous_response_id"})
		return
	}
	alias := s.path.Policy().Alias(req.Model)
	if alias == nil {
		s.turnError(w, api.ModelNotFound(req.Model))
		return
	}
	// A virtual key's models and rate before the turn is written; its
	// cost and tokens are reserved per attempt, as for chat.
	if apiErr := s.path.GateKey(r, alias.Name); apiErr != nil {
		s.turnError(w, apiErr)
		return
	}
	canon, err := identity.Canonicalize(body)
	if err != nil {
		s.turnError(w, api.Errorf(api.CodeInvalidRequest, "request body is not canonical JSON: %v", err))
		return
	}
	requestSHA, err := turnSHA(canon)
	if err != nil {
		s.turnError(w, api.Errorf(api.CodeInvalidRequest, "request body is not a JSON object: %v", err))
		return
	}
	ctx := r.Context()
	keyID := s.path.KeyID(r)
	var parent *ledger.Turn
	var history []*ledger.Turn
	if req.PreviousResponseID != "" {
		if parent, history, apiErr = s.parentOf(ctx, t.ID, keyID, req.PreviousResponseID); apiErr != nil {
			s.turnError(w, apiErr)
			return
		}
	}
	// The turn's identities are in its key's scope (docs/identity.md).
	scope := identity.Scope(t.ID, keyID)
	fp := identity.Fingerprint(s.secret, scope, provider.Responses.Operation(), requestSHA)
	// A gateway before stream left turns' digests stored a turn under
	// its whole body's fingerprint: the same turn, if it is found so.
	legacy := identity.Fingerprint(s.secret, scope, provider.Responses.Operation(), identity.SHA256Hex(canon))
	now := s.clock.Now()
	turn := &ledger.Turn{ResponseID: newResponseID(), Tenant: t.ID, KeyID: keyID, Depth: 1, Fingerprint: fp, RequestSHA256: requestSHA,
		State: ledger.TurnPending, Try: 1, RequestID: uuid.Must(uuid.NewV7()).String(), Request: body, CreatedAt: now, UpdatedAt: now}
	turn.Conversation = turn.ResponseID
	switch {
	case !req.Store && alias.Stateful:
		s.turnError(w, &api.Error{Code: api.CodeInvalidRequest, Param: "store",
			Message: "the model `" + alias.Name + "` keeps every turn at the provider: store cannot be false"})
		return
	case parent != nil && req.Store:
		turn.Parent, turn.Conversation, turn.Depth = parent.ResponseID, parent.Conversation, parent.Depth+1
	case parent != nil:
		// Not stored: the turn reads the conversation but does not join
		// it, so it holds no place in it (and cannot be continued).
		turn.Depth = parent.Depth + 1
	}
	if key != "" {
		turn.KeyDigest = identity.KeyDigest(scope, provider.Responses.Operation(), key)
	}
	turn.Input, _ = json.Marshal(inputItems(turn.ResponseID, req.Input))
	join, apiErr := s.path.Joins(r, alias)
	if apiErr != nil {
		s.turnError(w, apiErr)
		return
	}
	switch {
	case key != "":
	case !join:
		turn.Fingerprint = "" // an independent turn: no retry finds it
	default:
		// A keyless retry finds the turn it repeats by its body and
		// parent: while that turn is in flight, or within the replay
		// windows once it has settled. Past them, the same body is a new
		// user action — a new branch, as a regenerated answer is.
		if prev := s.repeated(r, t.ID, turn.Parent, fp, legacy); prev != nil {
			s.continueTurn(w, r, t, alias, req, prev, history)
			return
		}
	}
	existing, created, err := s.ledger.BeginTurn(ctx, turn)
	switch {
	case err != nil:
		s.storeError(w, err)
	case created:
		s.metrics.ObserveTurn(t.ID, "user")
		if turn.Branch > 0 {
			s.metrics.ObserveBranch()
		}
		s.runTurn(w, r, t, alias, req, turn, history)
	case existing.Fingerprint != fp && existing.Fingerprint != legacy:
		s.turnError(w, api.Errorf(api.CodeKeyReused, "the idempotency key was used with a different request body (turn %s)", existing.ResponseID))
	default:
		s.continueTurn(w, r, t, alias, req, existing, history)
	}
}

// repeated finds the turn a keyless arrival repeats: the newest keyless
// turn on parent under the first of fps that names one, if repeats says
// the arrival is its retry; nil if there is none.
func (s *Service) repeated(r *http.Request, tenant, parent string, fps ...string) *ledger.Turn {
	for i, fp := range fps {
		if i > 0 && fp == fps[i-1] {
			continue
		}
		if prev, err := s.ledger.TurnByFingerprint(r.Context(), tenant, fp, parent); err == nil {
			if s.repeats(prev, r) {
				return prev
			}
			return nil
		}
	}
	return nil
}

// repeats reports whether a keyless arrival whose body matches turn prev
// (on the same parent) is a retry of it: prev is in flight, or settled
// within idempotency.fingerprint_replay_window (sdk_retry_window for an
// official SDK's retry).
func (s *Service) repeats(prev *ledger.Turn, r *http.Request) bool {
	if prev.State.InFlight() {
		return true
	}
	window := s.path.Policy().Idempotency.FingerprintReplayWindow.D()
	if s.path.ClientRetries(r.Header) > 0 {
		window = max(window, s.path.Policy().Idempotency.SDKRetryWindow.D())
	}
	return s.clock.Now().Sub(prev.UpdatedAt) < window
}

// parentOf loads the turn a request continues and the conversation up to
// it. Only a done, undeleted turn can be continued, and by a virtual key
// (keyID) only its own: another key's is not found. An unknown or stale
// one is reconciled first.
func (s *Service) parentOf(ctx context.Context, tenant, keyID, id string) (*ledger.Turn, []*ledger.Turn, *api.Error) {
	p, err := s.ledger.Turn(ctx, tenant, id)
	if errors.Is(err, ledger.ErrNotFound) || err == nil && (p.Deleted || !stored(p) || !mayRead(keyID, p)) {
		return nil, nil, &api.Error{Code: api.CodeResponseNotFound, Param: "previous_response_id", Message: "previous response with id '" + id + "' not found"}
	}
	if err != nil {
		return nil, nil, api.StoreUnavailable(err)
	}
	if p, err = s.refreshTurn(ctx, p); err != nil {
		return nil, nil, api.StoreUnavailable(err)
	}
	switch p.State {
	case ledger.TurnPending, ledger.TurnUnknown:
		e := api.Errorf(api.CodeConversationBusy, "response %s has not finished; continue from it once it has", id)
		e.RetryAfter = 1
		return nil, nil, e
	case ledger.TurnFailed:
		return nil, nil, &api.Error{Code: api.CodeInvalidRequest, Param: "previous_response_id",
			Message: "response " + id + " failed and cannot be continued; " + s.goOnFrom(ctx, p)}
	}
	turns, err := s.ledger.ConversationTurns(ctx, tenant, p.Conversation)
	if err != nil {
		return nil, nil, api.StoreUnavailable(err)
	}
	return p, ledger.Chain(turns, p.ResponseID), nil
}

// stored reports whether a turn's response may be read and continued: a
// request with "store": false keeps its turn only to answer its retries.
func stored(t *ledger.Turn) bool {
	var r struct {
		Store *bool `json:"store"`
	}
	_ = json.Unmarshal(t.Request, &r)
	return r.Store == nil || *r.Store
}

// inputItems gives a turn's input items the ids the listing shows.
func inputItems(responseID string, in []provider.Item) []provider.Item {
	out := make([]provider.Item, len(in))
	base := strings.TrimPrefix(responseID, "resp_")
	for i, it := range in {
		prefix := "msg"
		switch it.Type {
		case provider.ItemFunctionCall:
			prefix = "fc"
		case provider.ItemFunctionCallOutput:
			prefix = "fco"
		}
		it.ID = prefix + "_" + base + "in" + strconv.Itoa(i)
		if it.Status == "" {
			it.Status = "completed"
		}
		out[i] = it
	}
	return out
}

// ServeResponse handles GET /v1/responses/{id}.
func (s *Service) ServeResponse(w http.ResponseWriter, r *http.Request, t *policy.Tenant) {
	turn, apiErr := s.lookupTurn(r, t)
	if apiErr != nil {
		s.turnError(w, apiErr)
		return
	}
	var body []byte
	switch turn.State {
	case ledger.TurnDone:
		body = turn.Response
		if err := s.sweepTip(r.Context(), turn); err != nil {
			s.log.Warn("could not read a stateful conversation", "response_id", turn.ResponseID, "err", err)
		}
	case ledger.TurnFailed:
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(turn.Response, &e)
		body = provider.EncodeResponsesStatus(s.shellOf(turn), "failed", e.Error.Code, e.Error.Message)
	default:
		body = provider.EncodeResponsesStatus(s.shellOf(turn), "in_progress", "", "")
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// lookupTurn finds the tenant's turn named by the path, brought up to
// date; for a virtual key, only a turn it made (another key's is not
// found, as one that does not exist).
func (s *Service) lookupTurn(r *http.Request, t *policy.Tenant) (*ledger.Turn, *api.Error) {
	id := r.PathValue("id")
	turn, err := s.ledger.Turn(r.Context(), t.ID, id)
	if errors.Is(err, ledger.ErrNotFound) || err == nil && (turn.Deleted || !stored(turn) || !mayRead(s.path.KeyID(r), turn)) {
		return nil, &api.Error{Code: api.CodeResponseNotFound, Message: "response with id '" + id + "' not found"}
	}
	if err != nil {
		return nil, api.StoreUnavailable(err)
	}
	if turn, err = s.refreshTurn(r.Context(), turn); err != nil {
		return nil, api.StoreUnavailable(err)
	}
	return turn, nil
}

// DeleteResponse handles DELETE /v1/responses/{id}: the response is no
// longer served, replayed or continued.
func (s *Service) DeleteResponse(w http.ResponseWriter, r *http.Request, t *policy.Tenant) {
	turn, apiErr := s.lookupTurn(r, t)
	if apiErr != nil {
		s.turnError(w, apiErr)
		return
	}
	if turn.State == ledger.TurnPending {
		e := api.Errorf(api.CodeConversationBusy, "response %s has not finished; delete it once it has", turn.ResponseID)
		e.RetryAfter = 1
		s.turnError(w, e)
		return
	}
	del := *turn
	del.UpdatedAt = s.clock.Now()
	// The turn and, in the same commit, its tries' records: a stored
	// answer there would replay the deleted response.
	if ok, err := s.ledger.DeleteTurn(r.Context(), &del, turn.State, turn.Try); err != nil || !ok {
		s.turnError(w, api.Errorf(api.CodeConversationBusy, "response %s changed while it was being deleted; try again", turn.ResponseID))
		return
	}
	api.WriteJSON(w, http.StatusOK, map[string]any{"id": turn.ResponseID, "object": "response", "deleted": true})
}

// ServeInputItems handles GET /v1/responses/{id}/input_items: the turn's
// input items, newest first unless order=asc, paged by after/before.
func (s *Service) ServeInputItems(w http.ResponseWriter, r *http.Request, t *policy.Tenant) {
	turn, apiErr := s.lookupTurn(r, t)
	if apiErr != nil {
		s.turnError(w, apiErr)
		return
	}
	var items []provider.Item
	if err := json.Unmarshal(turn.Input, &items); err != nil {
		s.turnError(w, api.Errorf(api.CodeInternal, "stored input of %s: %v", turn.ResponseID, err))
		return
	}
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			s.turnError(w, &api.Error{Code: api.CodeInvalidRequest, Param: "limit", Message: "limit must be a whole number from 1 to 100, found " + strconv.Quote(v)})
			return
		}
		limit = n
	}
	switch q.Get("order") {
	case "", "desc":
		for i, j := 0, len(items)-1; i < j; i, j = i+1, j-1 {
			items[i], items[j] = items[j], items[i]
		}
	case "asc":
	default:
		s.turnError(w, &api.Error{Code: api.CodeInvalidRequest, Param: "order", Message: "order must be asc or desc"})
		return
	}
	if after := q.Get("after"); after != "" {
		items = itemsAfter(items, after)
	}
	if before := q.Get("before"); before != "" {
		for i, it := range items {
			if it.ID == before {
				items = items[:i]
				break
			}
		}
	}
	api.WriteJSON(w, http.StatusOK, provider.ItemList(items, limit))
}

func itemsAfter(items []provider.Item, after string) []provider.Item {
	for i, it := range items {
		if it.ID == after {
			return items[i+1:]
		}
	}
	return nil
}

// storeError answers a turn the store could not read or write: nothing
// was sent, so the client may come back.
func (s *Service) storeError(w http.ResponseWriter, err error) {
	s.turnError(w, api.StoreUnavailable(err))
}

// mayRead reports whether a request that came with virtual key keyID
// ("" for the tenant's own keys) may read, continue or delete turn: what
// a virtual key made is its own (docs/keys-and-teams.md, "Ownership"), and another
// key's turn is answered as one that does not exist.
func mayRead(keyID string, turn *ledger.Turn) bool {
	return keyID == "" || turn.KeyID == keyID
}
