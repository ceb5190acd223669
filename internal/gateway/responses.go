package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/coord"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/identity"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/receipt"
	"github.com/oncegate/oncegate/internal/sse"
)

// The Responses API, served by the gateway over any route: the gateway
// holds each conversation in its turn ledger and sends the whole of it to
// whichever route serves a turn. See docs/conversations.md.

// turnCall is what a logical request knows of the conversation turn it is
// a try of.
type turnCall struct {
	turn  *ledger.Turn
	shell provider.ResponseShell
	req   *provider.ResponsesRequest
	// input is the turn's new input items; history the conversation's
	// items before it.
	input, history []provider.Item
	// parentUpstream is the parent turn's stateful-route record.
	parentUpstream []byte
	// upstreamID is the stateful route's response id, once a reply
	// named it.
	upstreamID string
}

// turnIdentity is the ledger identity of a turn's current try: each try
// is a logical request of its own, with its own receipt.
func turnIdentity(t *ledger.Turn) string { return ledger.TryIdentity(t.ResponseID, t.Try) }

// newResponseID names a new turn's response.
func newResponseID() string {
	return "resp_og" + strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", "")
}

// errTurn is a turn refused before any logical request.
func (g *Gateway) turnError(w http.ResponseWriter, e *api.Error) {
	e.Write(w, provider.Responses, api.Meta{})
}

// serveResponses handles POST /v1/responses: one turn of a conversation.
// The turn is written (pending) before anything is sent; a retry of it —
// the same Idempotency-Key, or the same body on the same parent while it
// is in flight or within the replay windows — finds it and continues it,
// never appending a copy. Any other turn on a response is a new branch of
// the conversation: one turn per user action, however many per response.
func (g *Gateway) serveResponses(w http.ResponseWriter, r *http.Request) {
	t, lk, release, apiErr := g.enterTenant(r)
	if apiErr != nil {
		g.turnError(w, apiErr)
		return
	}
	defer release()
	key, body, apiErr := g.readRequest(w, r)
	if apiErr != nil {
		g.turnError(w, apiErr)
		return
	}
	req, err := provider.ParseResponsesRequest(body)
	if err != nil {
		g.turnError(w, invalidRequest(err))
		return
	}
	accessOf(r.Context()).set(func(a *accessLog) { a.model = req.Model })
	if req.Conversation != "" {
		g.turnError(w, &api.Error{Code: api.CodeInvalidRequest, Param: "conversation",
			Message: "conversation objects are not supported: continue a conversation with previous_response_id"})
		return
	}
	alias := g.policy().Alias(req.Model)
	if alias == nil {
		g.turnError(w, modelNotFound(req.Model))
		return
	}
	if lk != nil {
		// The key's models and rate before the turn is written; its cost
		// and tokens are reserved per attempt, as for chat (runTurn).
		if apiErr := g.gateKey(lk, alias.Name); apiErr != nil {
			g.turnError(w, apiErr)
			return
		}
	}
	canon, err := identity.Canonicalize(body)
	if err != nil {
		g.turnError(w, api.Errorf(api.CodeInvalidRequest, "request body is not canonical JSON: %v", err))
		return
	}
	requestSHA, err := turnSHA(canon)
	if err != nil {
		g.turnError(w, api.Errorf(api.CodeInvalidRequest, "request body is not a JSON object: %v", err))
		return
	}
	ctx := r.Context()
	keyID := keyIDOf(r)
	var parent *ledger.Turn
	var history []*ledger.Turn
	if req.PreviousResponseID != "" {
		if parent, history, apiErr = g.parentOf(ctx, t.ID, keyID, req.PreviousResponseID); apiErr != nil {
			g.turnError(w, apiErr)
			return
		}
	}
	// The turn's identities are in its key's scope (docs/identity.md).
	scope := identity.Scope(t.ID, keyID)
	fp := identity.Fingerprint(g.secret, scope, provider.Responses.Operation(), requestSHA)
	// A gateway before stream left turns' digests stored a turn under
	// its whole body's fingerprint: the same turn, if it is found so.
	legacy := identity.Fingerprint(g.secret, scope, provider.Responses.Operation(), identity.SHA256Hex(canon))
	now := g.clock.Now()
	turn := &ledger.Turn{ResponseID: newResponseID(), Tenant: t.ID, KeyID: keyID, Depth: 1, Fingerprint: fp, RequestSHA256: requestSHA,
		State: ledger.TurnPending, Try: 1, RequestID: uuid.Must(uuid.NewV7()).String(), Request: body, CreatedAt: now, UpdatedAt: now}
	turn.Conversation = turn.ResponseID
	switch {
	case !req.Store && alias.Stateful:
		g.turnError(w, &api.Error{Code: api.CodeInvalidRequest, Param: "store",
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
	join, apiErr := joinsOf(r.Header, g.policy().Idempotency.KeylessJoin)
	if apiErr != nil {
		g.turnError(w, apiErr)
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
		if prev := g.repeated(r, t.ID, turn.Parent, fp, legacy); prev != nil {
			g.continueTurn(w, r, t, alias, req, prev, history)
			return
		}
	}
	existing, created, err := g.ledger.BeginTurn(ctx, turn)
	switch {
	case err != nil:
		g.storeError(w, err)
	case created:
		g.metrics.ObserveTurn(t.ID, "user")
		if turn.Branch > 0 {
			g.metrics.ObserveBranch()
		}
		g.runTurn(w, r, t, alias, req, turn, history)
	case existing.Fingerprint != fp && existing.Fingerprint != legacy:
		g.turnError(w, api.Errorf(api.CodeKeyReused, "the idempotency key was used with a different request body (turn %s)", existing.ResponseID))
	default:
		g.continueTurn(w, r, t, alias, req, existing, history)
	}
}

// repeated finds the turn a keyless arrival repeats: the newest keyless
// turn on parent under the first of fps that names one, if repeats says
// the arrival is its retry; nil if there is none.
func (g *Gateway) repeated(r *http.Request, tenant, parent string, fps ...string) *ledger.Turn {
	for i, fp := range fps {
		if i > 0 && fp == fps[i-1] {
			continue
		}
		if prev, err := g.ledger.TurnByFingerprint(r.Context(), tenant, fp, parent); err == nil {
			if g.repeats(prev, r) {
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
func (g *Gateway) repeats(prev *ledger.Turn, r *http.Request) bool {
	if prev.State.InFlight() {
		return true
	}
	window := g.policy().Idempotency.FingerprintReplayWindow.D()
	if clientRetryCount(r.Header) > 0 {
		window = max(window, g.policy().Idempotency.SDKRetryWindow.D())
	}
	return g.clock.Now().Sub(prev.UpdatedAt) < window
}

// parentOf loads the turn a request continues and the conversation up to
// it. Only a done, undeleted turn can be continued, and by a virtual key
// (keyID) only its own: another key's is not found. An unknown or stale
// one is reconciled first.
func (g *Gateway) parentOf(ctx context.Context, tenant, keyID, id string) (*ledger.Turn, []*ledger.Turn, *api.Error) {
	p, err := g.ledger.Turn(ctx, tenant, id)
	if errors.Is(err, ledger.ErrNotFound) || err == nil && (p.Deleted || !stored(p) || !mayRead(keyID, p)) {
		return nil, nil, &api.Error{Code: api.CodeResponseNotFound, Param: "previous_response_id", Message: "previous response with id '" + id + "' not found"}
	}
	if err != nil {
		return nil, nil, storeAPIError(err)
	}
	if p, err = g.refreshTurn(ctx, p); err != nil {
		return nil, nil, storeAPIError(err)
	}
	switch p.State {
	case ledger.TurnPending, ledger.TurnUnknown:
		e := api.Errorf(api.CodeConversationBusy, "response %s has not finished; continue from it once it has", id)
		e.RetryAfter = 1
		return nil, nil, e
	case ledger.TurnFailed:
		return nil, nil, &api.Error{Code: api.CodeInvalidRequest, Param: "previous_response_id",
			Message: "response " + id + " failed and cannot be continued; " + g.goOnFrom(ctx, p)}
	}
	turns, err := g.ledger.ConversationTurns(ctx, tenant, p.Conversation)
	if err != nil {
		return nil, nil, storeAPIError(err)
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

// continueTurn serves an arrival that repeats an existing turn: the
// answer a done turn committed, the try in flight for a pending one, a
// new try for one that ended without an answer.
func (g *Gateway) continueTurn(w http.ResponseWriter, r *http.Request, t *policy.Tenant, alias *policy.Alias,
	req *provider.ResponsesRequest, turn *ledger.Turn, history []*ledger.Turn) {
	ctx := r.Context()
	turn, err := g.refreshTurn(ctx, turn)
	if err != nil {
		g.storeError(w, err)
		return
	}
	if turn.Deleted {
		g.turnError(w, deletedError(turn))
		return
	}
	switch turn.State {
	case ledger.TurnDone:
		g.metrics.ObserveDedup(t.ID, "replayed")
		g.replayTurn(w, r, turn, req.Stream, "replayed")
		return
	case ledger.TurnPending:
		g.runTurn(w, r, t, alias, req, turn, history)
		return
	}
	// Unknown or failed: nothing of the turn is in the conversation the
	// gateway holds, so it is tried again, under its key, on the same
	// parent — unless max_ambiguous tries already ended not knowing.
	if turn.Ambiguous >= g.policy().Conversations.MaxAmbiguous {
		if turn.State == ledger.TurnUnknown {
			turn = g.abandonTurn(ctx, turn)
		}
		g.replayFailure(w, turn)
		return
	}
	if turn.State == ledger.TurnUnknown && readUpstream(turn.Upstream).Conversation != "" {
		// A stateful provider may hold this turn, and could not be asked
		// (refreshTurn tried): trying it again now would be blind, and a
		// late commit of the last try would stay in the provider's
		// conversation unaccounted for (docs/conversations.md).
		e := api.Errorf(api.CodeOutcomeUnknown, "response %s: the provider may have committed this turn and could not be asked whether it did; "+
			"send the turn again shortly: it is reconciled first, never sent blind", turn.ResponseID)
		e.RetryAfter = 1
		g.turnError(w, e)
		return
	}
	next := *turn
	next.State, next.Try, next.RequestID, next.UpdatedAt = ledger.TurnPending, turn.Try+1, uuid.Must(uuid.NewV7()).String(), g.clock.Now()
	next.Response, next.Status = nil, 0
	ok, err := g.ledger.UpdateTurn(ctx, &next, turn.State, turn.Try)
	switch {
	case err != nil:
		g.storeError(w, err)
	case !ok:
		// Another arrival moved the turn on first: serve what it made.
		moved, err := g.ledger.Turn(ctx, t.ID, turn.ResponseID)
		if err != nil {
			g.storeError(w, err)
			return
		}
		if moved.State == ledger.TurnPending || moved.State == ledger.TurnDone {
			g.continueTurn(w, r, t, alias, req, moved, history)
			return
		}
		e := api.Errorf(api.CodeConversationBusy, "response %s is being retried; try again", turn.ResponseID)
		e.RetryAfter = 1
		g.turnError(w, e)
	default:
		g.runTurn(w, r, t, alias, req, &next, history)
	}
}

// deletedError answers a retry of a turn whose response was deleted: the
// deleted answer is never served again, and a new turn needs a new
// Idempotency-Key (the key names the deleted one).
func deletedError(turn *ledger.Turn) *api.Error {
	return &api.Error{Code: api.CodeResponseNotFound, Message: "response with id '" + turn.ResponseID +
		"' not found: it was deleted, and is not answered again; send a new turn (with a new Idempotency-Key)"}
}

// abandonTurn gives up on a turn that ended not knowing: it is marked
// failed, so its parent can be continued again, with an error that says
// so.
func (g *Gateway) abandonTurn(ctx context.Context, turn *ledger.Turn) *ledger.Turn {
	failed := *turn
	failed.UpdatedAt = g.clock.Now()
	failed.State = ledger.TurnFailed
	failed.Status, failed.Response = giveUp(turn, g.goOnFrom(ctx, turn))
	if ok, err := g.ledger.UpdateTurn(ctx, &failed, turn.State, turn.Try); err != nil || !ok {
		return turn
	}
	return &failed
}

// giveUp is the error a turn given up answers with: its status and body.
// goOn says where the conversation goes on from (goOnFrom).
func giveUp(turn *ledger.Turn, goOn string) (int, []byte) {
	e := api.Errorf(api.CodeOutcomeUnknown, "response %s was given up: %d of its tries ended without knowing whether the provider answered; "+
		"nothing was added to the conversation; %s", turn.ResponseID, turn.Ambiguous, goOn)
	head, body := e.Render(provider.Responses, api.Meta{RequestID: turn.RequestID, Terminal: gw.TerminalIndeterminate, Reason: gw.ReasonIndeterminate})
	return head.Status, body
}

// goOnFrom says where a conversation goes on from in place of turn: its
// parent, or its start. A deleted response is never offered as a place to
// continue from.
func (g *Gateway) goOnFrom(ctx context.Context, turn *ledger.Turn) string {
	if turn.Parent == "" {
		return "the conversation continues from its start"
	}
	if p, err := g.ledger.Turn(ctx, turn.Tenant, turn.Parent); err == nil && p.Deleted {
		return "the response it continued, " + turn.Parent + ", was deleted: continue from an earlier one"
	}
	return "the conversation continues from " + turn.Parent
}

// replayFailure answers with the error a failed turn ended with.
func (g *Gateway) replayFailure(w http.ResponseWriter, turn *ledger.Turn) {
	if turn.Status == 0 || len(turn.Response) == 0 {
		g.turnError(w, api.Errorf(api.CodeOutcomeUnknown, "response %s ended without an answer", turn.ResponseID))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("x-should-retry", "false")
	api.SetIDHeaders(h, turn.RequestID, 0)
	w.WriteHeader(turn.Status)
	_, _ = w.Write(turn.Response)
}

// runTurn runs (or joins) the turn's current try as a logical request.
func (g *Gateway) runTurn(w http.ResponseWriter, r *http.Request, t *policy.Tenant, alias *policy.Alias,
	req *provider.ResponsesRequest, turn *ledger.Turn, history []*ledger.Turn) {
	ir, items, err := turnRequest(req, history)
	if err != nil {
		g.turnError(w, invalidRequest(err))
		return
	}
	cr := &provider.ClientRequest{Protocol: provider.Responses, Body: turn.Request, IR: ir, PromptTokens: provider.PromptTokens(ir)}
	c, apiErr := g.identify(r, &admitted{proto: provider.Responses, tenant: t, alias: alias, parsed: cr, requestSHA: turn.RequestSHA256})
	if apiErr != nil {
		g.turnError(w, apiErr)
		return
	}
	c.id, c.identity = turn.RequestID, turnIdentity(turn)
	if lk := keyOf(r.Context()); lk != nil {
		// Each attempt reserves its worst case under the key as well
		// (docs/keys.md); one that does not fit ends the try refused.
		c.key = &keyCall{lk: lk}
	}
	h := c.rec.R
	h.RequestID, h.KeySHA256, h.Fingerprint = c.id, turn.KeyDigest, turn.Fingerprint
	if h.Fingerprint == "" {
		// A turn that joins nothing: its receipt still names its body.
		h.Fingerprint = identity.Fingerprint(g.secret, identity.Scope(t.ID, turn.KeyID), provider.Responses.Operation(), turn.RequestSHA256)
	}
	h.Conversation = &receipt.Conversation{ID: turn.Conversation, ResponseID: turn.ResponseID, PreviousResponseID: turn.Parent,
		Turn: turn.Depth, Try: turn.Try}
	c.turn = &turnCall{turn: turn, shell: provider.ShellOf(req, turn.ResponseID, turn.CreatedAt.Unix()), req: req, history: items}
	c.turn.shell.Now = func() int64 { return g.clock.Now().Unix() }
	if err := json.Unmarshal(turn.Input, &c.turn.input); err != nil {
		g.turnError(w, api.Errorf(api.CodeInternal, "stored input of %s: %v", turn.ResponseID, err))
		return
	}
	if n := len(history); n > 0 {
		c.turn.parentUpstream = history[n-1].Upstream
	}
	if alias.Stateful {
		// The conversation lives upstream: never hedged, never
		// continued by prefill.
		h.Request.Stateful, h.Request.NoContinuation = true, true
	}
	// The engine's view of the request (its id seeds the jitter) is
	// taken from the header: start it again with the turn's.
	c.rec = receipt.NewRecorder(alias, *h)
	fw := newFormWriter(w, req.Stream)
	g.place(fw, r, c)
	if fw.other {
		g.answerInForm(w, r, t, fw, turn.ResponseID)
	}
}

// turnRequest is the neutral request for a turn: the conversation so far,
// then the new input, under this request's instructions. It also returns
// the conversation's items before the turn.
func turnRequest(req *provider.ResponsesRequest, history []*ledger.Turn) (*provider.Request, []provider.Item, error) {
	items, err := historyItems(history)
	if err != nil {
		return nil, nil, err
	}
	system, msgs := provider.ItemsToMessages(append(slices.Clone(items), req.Input...))
	if req.Instructions != nil && *req.Instructions != "" {
		system = append([]string{*req.Instructions}, system...)
	}
	if len(msgs) == 0 {
		return nil, nil, &provider.InvalidRequestError{Param: "input", Message: "the conversation has no user or assistant message to answer"}
	}
	return &provider.Request{Model: req.Model, System: strings.Join(system, "\n\n"), Messages: msgs, Tools: req.Tools,
		ToolChoice: req.ToolChoice, MaxTokens: req.MaxOutputTokens, Temperature: req.Temperature, TopP: req.TopP,
		Stream: req.Stream, User: req.User, ParallelToolCalls: req.ParallelToolCalls}, items, nil
}

// historyItems are the items of a chain of done turns: each turn's input,
// then its answer.
func historyItems(history []*ledger.Turn) ([]provider.Item, error) {
	var items []provider.Item
	for _, h := range history {
		var in []provider.Item
		if err := json.Unmarshal(h.Input, &in); err != nil {
			return nil, fmt.Errorf("stored input of %s: %w", h.ResponseID, err)
		}
		out, _, err := provider.ResponseOutput(h.Response)
		if err != nil {
			return nil, fmt.Errorf("stored output of %s: %w", h.ResponseID, err)
		}
		items = append(append(items, in...), out...)
	}
	return items, nil
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

// settleTurn writes what a finished try made of its turn: done with the
// response object, unknown when the try could not tell whether its answer
// was produced, failed (nothing committed) otherwise. It runs before the
// clients get their last byte, so a client that continues the
// conversation finds the turn done.
func (c *call) settleTurn(head *coord.Head, tail []byte, last *attemptResult) {
	tc := c.turn
	next := *tc.turn
	r := c.rec.R
	next.UpdatedAt = c.g.clock.Now()
	switch {
	case r.Terminal == string(gw.TerminalSucceeded):
		next.State = ledger.TurnDone
		if enc, ok := c.out.enc.(*provider.ResponsesEncoder); ok && c.stream {
			next.Response = enc.Final()
		} else if last != nil {
			next.Response = last.body
		}
	case ledgerState(gw.Terminal(r.Terminal)) == ledger.Indeterminate || r.Terminal == string(gw.TerminalCancelled) && c.visible(),
		c.cancelledUpstream():
		next.State = ledger.TurnUnknown
		next.Ambiguous += c.ambiguousAttempts()
		if next.Ambiguous >= c.g.policy().Conversations.MaxAmbiguous && c.knownUncommitted() {
			// The last try it may have, and nothing of it is anywhere:
			// the turn is given up now, so the conversation can go on
			// from its parent at once. (If a stateful provider may hold
			// the answer, the next arrival reconciles first.)
			next.State = ledger.TurnFailed
			next.Status, next.Response = giveUp(&next, c.g.goOnFrom(context.Background(), &next))
		}
	default:
		next.State = ledger.TurnFailed
		if head != nil {
			next.Status, next.Response = head.Status, tail
		}
	}
	ok, err := c.g.ledger.UpdateTurn(context.Background(), &next, tc.turn.State, tc.turn.Try)
	if err != nil || !ok {
		// The turn stays pending: the next arrival on it reads the try's
		// record and settles the turn from there (refreshTurn).
		c.g.log.Warn("could not settle a turn", "response_id", next.ResponseID, "request_id", c.id, "updated", ok, "err", err)
		return
	}
	if next.State == ledger.TurnDone {
		c.g.metrics.ObserveTurn(c.tenant.ID, "assistant")
	}
	tc.turn = &next
}

// turnUnknownError is what a client is told when a try of its turn ended
// not knowing whether the provider answered.
func (c *call) turnUnknownError() *api.Error {
	t := c.turn.turn
	if c.knownUncommitted() && t.Ambiguous+c.ambiguousAttempts() >= c.g.policy().Conversations.MaxAmbiguous {
		return api.Errorf(api.CodeOutcomeUnknown, "response %s was given up: %d of its attempts ended without an answer and nothing of them was committed; %s",
			t.ResponseID, t.Ambiguous+c.ambiguousAttempts(), c.g.goOnFrom(context.Background(), t))
	}
	return api.Errorf(api.CodeOutcomeUnknown, "response %s: the provider may have committed this turn, but its reply was lost; "+
		"send the turn again (the same Idempotency-Key, or the same body): it is reconciled with the provider, never sent blind", t.ResponseID)
}

// ambiguousAttempts counts what a try that ended unknown adds to its
// turn's ambiguous count: on a stateful route each attempt found absent or
// left unknown by the reconciliation; otherwise the try itself.
func (c *call) ambiguousAttempts() int {
	if !c.alias.Stateful {
		return 1
	}
	n := 0
	for _, a := range c.rec.R.Attempts {
		if a.Reconciled == "absent" || a.Reconciled == "unknown" || a.Kind == string(gw.KindCancelled) {
			n++
		}
	}
	return max(n, 1)
}

// knownUncommitted reports whether a try that ended unknown is known to
// have added nothing to the conversation: the gateway holds the
// conversation, or the provider was asked and holds none of it.
func (c *call) knownUncommitted() bool {
	r := c.rec.R
	return !c.alias.Stateful || len(r.Attempts) > 0 && r.Attempts[len(r.Attempts)-1].Reconciled == "absent"
}

// cancelledUpstream reports whether the try was cancelled (its clients
// left) while an attempt at a stateful route was out: the provider may
// have committed it, so the turn is unknown, to be reconciled.
func (c *call) cancelledUpstream() bool {
	r := c.rec.R
	if c.alias == nil || !c.alias.Stateful || r.Terminal != string(gw.TerminalCancelled) || len(r.Attempts) == 0 {
		return false
	}
	return r.Attempts[len(r.Attempts)-1].Kind == string(gw.KindCancelled)
}

// conversationFacts are the receipt's conversation counts once the try
// has ended: every earlier turn is done, so the conversation holds depth
// user turns and as many assistant turns if this one answered.
func (c *call) conversationFacts() {
	cv := c.rec.R.Conversation
	if cv == nil {
		return
	}
	cv.UserTurns, cv.AssistantTurns = c.turn.turn.Depth-1, c.turn.turn.Depth-1
	if c.rec.R.Terminal == string(gw.TerminalSucceeded) {
		cv.UserTurns++
		cv.AssistantTurns++
	}
}

// refreshTurn brings a pending turn up to date with its try's record: a
// gateway that stopped between the two commits, or crashed mid-try, left
// the turn behind. An unknown or failed turn is returned as it is.
func (g *Gateway) refreshTurn(ctx context.Context, turn *ledger.Turn) (*ledger.Turn, error) {
	turn, err := g.refreshPending(ctx, turn)
	if err != nil || turn.State != ledger.TurnUnknown || readUpstream(turn.Upstream).Conversation == "" {
		return turn, err
	}
	return g.reconcileTurn(ctx, turn)
}

// refreshPending is refreshTurn's first half: a pending turn's try's
// record says how it ended.
func (g *Gateway) refreshPending(ctx context.Context, turn *ledger.Turn) (*ledger.Turn, error) {
	if turn.State != ledger.TurnPending {
		return turn, nil
	}
	rec, err := g.ledger.Get(ctx, turnIdentity(turn))
	if errors.Is(err, ledger.ErrNotFound) {
		return turn, nil // not started, or released: the try can run
	}
	if err != nil {
		return nil, err
	}
	next := *turn
	next.UpdatedAt = g.clock.Now()
	switch rec.State {
	case ledger.InProgress:
		if !rec.LeaseUntil.Before(next.UpdatedAt) {
			return turn, nil
		}
		g.settleOne(ctx, rec)
		if rec, err = g.ledger.Get(ctx, turnIdentity(turn)); err != nil || rec.State == ledger.InProgress {
			return turn, nil
		}
	}
	switch rec.State {
	case ledger.Succeeded:
		next.State = ledger.TurnDone
		if next.Response, err = storedObject(rec.Response); err != nil {
			return nil, err
		}
	case ledger.Indeterminate:
		next.State = ledger.TurnUnknown
		next.Ambiguous++
	case ledger.FailedNoEffect:
		next.State = ledger.TurnFailed
		if rec.Response != nil {
			next.Status, next.Response = rec.Response.Status, rec.Response.Body
		}
	default:
		return turn, nil
	}
	return g.moveTurn(ctx, turn, &next)
}

// reconcileTurn settles an unknown turn on a stateful route by reading its
// upstream conversation: the answer committed there is adopted (done);
// absent, the turn committed nothing (failed: a retry of it runs it again).
// If the upstream cannot tell, the turn stays unknown.
func (g *Gateway) reconcileTurn(ctx context.Context, turn *ledger.Turn) (*ledger.Turn, error) {
	u := readUpstream(turn.Upstream)
	route := g.policy().Route(u.Route)
	if route == nil {
		return turn, nil
	}
	var history []*ledger.Turn
	if turn.Parent != "" {
		turns, err := g.ledger.ConversationTurns(ctx, turn.Tenant, turn.Conversation)
		if err != nil {
			return nil, err
		}
		history = ledger.Chain(turns, turn.Parent)
	}
	items, err := historyItems(history)
	if err != nil {
		return nil, err
	}
	var input []provider.Item
	if err := json.Unmarshal(turn.Input, &input); err != nil {
		return nil, fmt.Errorf("stored input of %s: %w", turn.ResponseID, err)
	}
	r, err := g.reconcile(ctx, route, u.Conversation, items, input, u.ResponseID)
	if err != nil {
		g.log.Warn("could not reconcile a turn", "response_id", turn.ResponseID, "err", err)
		return turn, nil
	}
	if len(r.orphans) > 0 {
		_, _, _ = g.recordOrphans(ctx, turn, route, u.Conversation, r.orphans, 0)
	}
	next := *turn
	next.UpdatedAt = g.clock.Now()
	if r.found != nil {
		next.State = ledger.TurnDone
		next.Response = provider.EncodeResponsesObject(g.shellOf(turn), r.found, next.UpdatedAt.Unix())
	} else {
		next.State = ledger.TurnFailed
		u.SuspectUntil = g.clock.Now().Add(suspectFor).UnixMilli()
		next.Upstream, _ = json.Marshal(u)
		e := api.Errorf(api.CodeOutcomeUnknown, "response %s was not committed by the provider before its reply was lost; retry the turn", turn.ResponseID)
		var head *coord.Head
		head, next.Response = e.Render(provider.Responses, api.Meta{RequestID: turn.RequestID})
		next.Status = head.Status
		if turn.Ambiguous >= g.policy().Conversations.MaxAmbiguous {
			next.Status, next.Response = giveUp(turn, g.goOnFrom(ctx, turn))
		}
	}
	return g.moveTurn(ctx, turn, &next)
}

// moveTurn writes next over turn if the turn has not moved on meanwhile,
// and returns what the turn is now.
func (g *Gateway) moveTurn(ctx context.Context, turn, next *ledger.Turn) (*ledger.Turn, error) {
	ok, err := g.ledger.UpdateTurn(ctx, next, turn.State, turn.Try)
	if err != nil {
		return nil, err
	}
	if !ok {
		return g.ledger.Turn(ctx, turn.Tenant, turn.ResponseID)
	}
	if next.State == ledger.TurnDone {
		g.metrics.ObserveTurn(next.Tenant, "assistant")
	}
	return next, nil
}

// storedObject reads the response object out of a try's stored answer:
// the JSON body, or a stream's final response event.
func storedObject(resp *ledger.Response) ([]byte, error) {
	if resp == nil {
		return nil, errors.New("the try succeeded with no stored answer")
	}
	if resp.ContentType != "text/event-stream" {
		return resp.Body, nil
	}
	rd := sse.NewReader(bytes.NewReader(resp.Body), len(resp.Body)+1)
	var final []byte
	for {
		ev, err := rd.Next()
		if err != nil {
			break
		}
		if ev.Type == "response.completed" || ev.Type == "response.incomplete" {
			var e struct {
				Response json.RawMessage `json:"response"`
			}
			if json.Unmarshal(ev.Data, &e) == nil {
				final = e.Response
			}
		}
	}
	if final == nil {
		return nil, errors.New("the stored stream has no final response event")
	}
	return final, nil
}

// replayTurn answers an arrival for a done turn with its response, in
// the form asked for: the object, or a stream of it (the try's own bytes
// when it was asked for in the same form). dedup labels the answer.
func (g *Gateway) replayTurn(w http.ResponseWriter, r *http.Request, turn *ledger.Turn, stream bool, dedup string) {
	if turn.Deleted {
		g.turnError(w, deletedError(turn))
		return
	}
	h := w.Header()
	api.SetIDHeaders(h, turn.RequestID, 0)
	h.Set("X-Oncegate-Dedup", dedup)
	if rec, err := g.ledger.Get(r.Context(), turnIdentity(turn)); err == nil && rec.Response != nil && rec.State == ledger.Succeeded &&
		(rec.Response.ContentType == "text/event-stream") == stream {
		h.Set("Content-Type", rec.Response.ContentType)
		api.SetIDHeaders(h, rec.RequestID, rec.Response.Attempts)
		if rec.Response.Route != "" {
			h.Set("X-Oncegate-Route", rec.Response.Route)
		}
		w.WriteHeader(rec.Response.Status)
		_, _ = w.Write(rec.Response.Body)
		return
	}
	if !stream {
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(turn.Response)
		return
	}
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(provider.StreamResponseObject(turn.Response))
}

// serveResponse handles GET /v1/responses/{id}.
func (g *Gateway) serveResponse(w http.ResponseWriter, r *http.Request, t *policy.Tenant) {
	turn, apiErr := g.lookupTurn(r, t)
	if apiErr != nil {
		g.turnError(w, apiErr)
		return
	}
	var body []byte
	switch turn.State {
	case ledger.TurnDone:
		body = turn.Response
		if err := g.sweepTip(r.Context(), turn); err != nil {
			g.log.Warn("could not read a stateful conversation", "response_id", turn.ResponseID, "err", err)
		}
	case ledger.TurnFailed:
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(turn.Response, &e)
		body = provider.EncodeResponsesStatus(g.shellOf(turn), "failed", e.Error.Code, e.Error.Message)
	default:
		body = provider.EncodeResponsesStatus(g.shellOf(turn), "in_progress", "", "")
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// sweepTip reads the upstream conversation of a done turn on a stateful
// route that may still receive a late commit, when the turn is its
// conversation's latest (so everything after it upstream is extra).
func (g *Gateway) sweepTip(ctx context.Context, turn *ledger.Turn) error {
	u := readUpstream(turn.Upstream)
	route := g.policy().Route(u.Route)
	if route == nil || u.Conversation == "" || !u.suspect(g.clock.Now()) {
		return nil
	}
	turns, err := g.ledger.ConversationTurns(ctx, turn.Tenant, turn.Conversation)
	if err != nil {
		return err
	}
	for _, t := range turns {
		if t.Parent == turn.ResponseID && t.State.Live() && readUpstream(t.Upstream).Conversation == u.Conversation {
			return nil // not the tip: its continuation there reads it
		}
	}
	items, err := historyItems(ledger.Chain(turns, turn.ResponseID))
	if err != nil {
		return err
	}
	return g.sweep(ctx, route, u.Conversation, items, turn)
}

// shellOf rebuilds a turn's response shell from its stored request.
func (g *Gateway) shellOf(turn *ledger.Turn) *provider.ResponseShell {
	req, err := provider.ParseResponsesRequest(turn.Request)
	if err != nil {
		return &provider.ResponseShell{ID: turn.ResponseID, CreatedAt: turn.CreatedAt.Unix()}
	}
	s := provider.ShellOf(req, turn.ResponseID, turn.CreatedAt.Unix())
	return &s
}

// lookupTurn finds the tenant's turn named by the path, brought up to
// date; for a virtual key, only a turn it made (another key's is not
// found, as one that does not exist).
func (g *Gateway) lookupTurn(r *http.Request, t *policy.Tenant) (*ledger.Turn, *api.Error) {
	id := r.PathValue("id")
	turn, err := g.ledger.Turn(r.Context(), t.ID, id)
	if errors.Is(err, ledger.ErrNotFound) || err == nil && (turn.Deleted || !stored(turn) || !mayRead(keyIDOf(r), turn)) {
		return nil, &api.Error{Code: api.CodeResponseNotFound, Message: "response with id '" + id + "' not found"}
	}
	if err != nil {
		return nil, storeAPIError(err)
	}
	if turn, err = g.refreshTurn(r.Context(), turn); err != nil {
		return nil, storeAPIError(err)
	}
	return turn, nil
}

// deleteResponse handles DELETE /v1/responses/{id}: the response is no
// longer served, replayed or continued.
func (g *Gateway) deleteResponse(w http.ResponseWriter, r *http.Request, t *policy.Tenant) {
	turn, apiErr := g.lookupTurn(r, t)
	if apiErr != nil {
		g.turnError(w, apiErr)
		return
	}
	if turn.State == ledger.TurnPending {
		e := api.Errorf(api.CodeConversationBusy, "response %s has not finished; delete it once it has", turn.ResponseID)
		e.RetryAfter = 1
		g.turnError(w, e)
		return
	}
	del := *turn
	del.UpdatedAt = g.clock.Now()
	// The turn and, in the same commit, its tries' records: a stored
	// answer there would replay the deleted response.
	if ok, err := g.ledger.DeleteTurn(r.Context(), &del, turn.State, turn.Try); err != nil || !ok {
		g.turnError(w, api.Errorf(api.CodeConversationBusy, "response %s changed while it was being deleted; try again", turn.ResponseID))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": turn.ResponseID, "object": "response", "deleted": true})
}

// serveInputItems handles GET /v1/responses/{id}/input_items: the turn's
// input items, newest first unless order=asc, paged by after/before.
func (g *Gateway) serveInputItems(w http.ResponseWriter, r *http.Request, t *policy.Tenant) {
	turn, apiErr := g.lookupTurn(r, t)
	if apiErr != nil {
		g.turnError(w, apiErr)
		return
	}
	var items []provider.Item
	if err := json.Unmarshal(turn.Input, &items); err != nil {
		g.turnError(w, api.Errorf(api.CodeInternal, "stored input of %s: %v", turn.ResponseID, err))
		return
	}
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			g.turnError(w, &api.Error{Code: api.CodeInvalidRequest, Param: "limit", Message: "limit must be a whole number from 1 to 100, found " + strconv.Quote(v)})
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
		g.turnError(w, &api.Error{Code: api.CodeInvalidRequest, Param: "order", Message: "order must be asc or desc"})
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
	writeJSON(w, http.StatusOK, provider.ItemList(items, limit))
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
func (g *Gateway) storeError(w http.ResponseWriter, err error) {
	g.turnError(w, storeAPIError(err))
}

func storeAPIError(err error) *api.Error {
	e := api.Errorf(api.CodeStoreUnavailable, "the gateway's store could not be reached: %v", err)
	e.RetryAfter = 1
	return e
}
