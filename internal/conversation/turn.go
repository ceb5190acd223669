package conversation

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/identity"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/receipt"
)

// A turn's tries: each runs as a logical request of the request path
// (Try), a retried turn is continued from where its last try left it, and
// a try settles its turn as it ends.

// Try is what a logical request knows of the conversation turn it is a
// try of. The request path holds it for the try's life and calls back
// through its methods: the stateful route's conversation
// (UpstreamConversation, Reconcile), the turn settled (Settle).
type Try struct {
	// Turn is the turn as this try last wrote it.
	Turn *ledger.Turn
	// Shell is the response object the answer is written into.
	Shell provider.ResponseShell
	// Req is the turn's request.
	Req *provider.ResponsesRequest
	// Input is the turn's new input items.
	Input []provider.Item
	// UpstreamID is the stateful route's response id, once a reply
	// named it (the request path sets it).
	UpstreamID string

	svc *Service
	// history is the conversation's items before the turn.
	history []provider.Item
	// parentUpstream is the parent turn's stateful-route record.
	parentUpstream []byte
	// tenant is the id of the tenant the try runs for.
	tenant string
	// stateful: the turn's model keeps its conversations upstream.
	stateful bool
}

// turnIdentity is the ledger identity of a turn's current try: each try
// is a logical request of its own, with its own receipt.
func turnIdentity(t *ledger.Turn) string { return ledger.TryIdentity(t.ResponseID, t.Try) }

// continueTurn serves an arrival that repeats an existing turn: the
// answer a done turn committed, the try in flight for a pending one, a
// new try for one that ended without an answer.
func (s *Service) continueTurn(w http.ResponseWriter, r *http.Request, t *policy.Tenant, alias *policy.Alias,
	req *provider.ResponsesRequest, turn *ledger.Turn, history []*ledger.Turn) {
	ctx := r.Context()
	turn, err := s.refreshTurn(ctx, turn)
	if err != nil {
		s.storeError(w, err)
		return
	}
	if turn.Deleted {
		s.turnError(w, deletedError(turn))
		return
	}
	switch turn.State {
	case ledger.TurnDone:
		s.metrics.ObserveDedup(t.ID, "replayed")
		s.replayTurn(w, r, turn, req.Stream, "replayed")
		return
	case ledger.TurnPending:
		s.runTurn(w, r, t, alias, req, turn, history)
		return
	}
	// Unknown or failed: nothing of the turn is in the conversation the
	// gateway holds, so it is tried again, under its key, on the same
	// parent — unless max_ambiguous tries already ended not knowing.
	if turn.Ambiguous >= s.path.Policy().Conversations.MaxAmbiguous {
		if turn.State == ledger.TurnUnknown {
			turn = s.abandonTurn(ctx, turn)
		}
		s.replayFailure(w, turn)
		return
	}
	if turn.State == ledger.TurnUnknown && ReadUpstream(turn.Upstream).Conversation != "" {
		// A stateful provider may hold this turn, and could not be asked
		// (refreshTurn tried): trying it again now would be blind, and a
		// late commit of the last try would stay in the provider's
		// conversation unaccounted for (docs/conversations.md).
		e := api.Errorf(api.CodeOutcomeUnknown, "response %s: the provider may have committed this turn and could not be asked whether it did; "+
			"send the turn again shortly: it is reconciled first, never sent blind", turn.ResponseID)
		e.RetryAfter = 1
		s.turnError(w, e)
		return
	}
	next := *turn
	next.State, next.Try, next.RequestID, next.UpdatedAt = ledger.TurnPending, turn.Try+1, uuid.Must(uuid.NewV7()).String(), s.clock.Now()
	next.Response, next.Status = nil, 0
	ok, err := s.ledger.UpdateTurn(ctx, &next, turn.State, turn.Try)
	switch {
	case err != nil:
		s.storeError(w, err)
	case !ok:
		// Another arrival moved the turn on first: serve what it made.
		moved, err := s.ledger.Turn(ctx, t.ID, turn.ResponseID)
		if err != nil {
			s.storeError(w, err)
			return
		}
		if moved.State == ledger.TurnPending || moved.State == ledger.TurnDone {
			s.continueTurn(w, r, t, alias, req, moved, history)
			return
		}
		e := api.Errorf(api.CodeConversationBusy, "response %s is being retried; try again", turn.ResponseID)
		e.RetryAfter = 1
		s.turnError(w, e)
	default:
		s.runTurn(w, r, t, alias, req, &next, history)
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
func (s *Service) abandonTurn(ctx context.Context, turn *ledger.Turn) *ledger.Turn {
	failed := *turn
	failed.UpdatedAt = s.clock.Now()
	failed.State = ledger.TurnFailed
	failed.Status, failed.Response = giveUp(turn, s.goOnFrom(ctx, turn))
	if ok, err := s.ledger.UpdateTurn(ctx, &failed, turn.State, turn.Try); err != nil || !ok {
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
func (s *Service) goOnFrom(ctx context.Context, turn *ledger.Turn) string {
	if turn.Parent == "" {
		return "the conversation continues from its start"
	}
	if p, err := s.ledger.Turn(ctx, turn.Tenant, turn.Parent); err == nil && p.Deleted {
		return "the response it continued, " + turn.Parent + ", was deleted: continue from an earlier one"
	}
	return "the conversation continues from " + turn.Parent
}

// runTurn runs (or joins) the turn's current try as a logical request.
func (s *Service) runTurn(w http.ResponseWriter, r *http.Request, t *policy.Tenant, alias *policy.Alias,
	req *provider.ResponsesRequest, turn *ledger.Turn, history []*ledger.Turn) {
	ir, items, err := turnRequest(req, history)
	if err != nil {
		s.turnError(w, api.InvalidRequest(err))
		return
	}
	cr := &provider.ClientRequest{Protocol: provider.Responses, Body: turn.Request, IR: ir, PromptTokens: provider.PromptTokens(ir)}
	tc := &Try{Turn: turn, Shell: provider.ShellOf(req, turn.ResponseID, turn.CreatedAt.Unix()), Req: req, svc: s, history: items, tenant: t.ID, stateful: alias.Stateful}
	tc.Shell.Now = func() int64 { return s.clock.Now().Unix() }
	place, apiErr := s.path.Identify(r, t, alias, cr, tc)
	if apiErr != nil {
		s.turnError(w, apiErr)
		return
	}
	if err := json.Unmarshal(turn.Input, &tc.Input); err != nil {
		s.turnError(w, api.Errorf(api.CodeInternal, "stored input of %s: %v", turn.ResponseID, err))
		return
	}
	if n := len(history); n > 0 {
		tc.parentUpstream = history[n-1].Upstream
	}
	fw := newFormWriter(w, req.Stream)
	place(fw)
	if fw.other {
		s.answerInForm(w, r, t, fw, turn.ResponseID)
	}
}

// Identity is the ledger identity of the try: each try of a turn is a
// logical request of its own, with its own receipt.
func (tc *Try) Identity() string { return turnIdentity(tc.Turn) }

// Describe writes the try's part of its receipt header h: its request id,
// the digests it is found by, the conversation it is a turn of and, on a
// stateful route, that it is never hedged or continued by prefill.
func (tc *Try) Describe(h *receipt.Receipt) {
	turn := tc.Turn
	h.RequestID, h.KeySHA256, h.Fingerprint = turn.RequestID, turn.KeyDigest, turn.Fingerprint
	if h.Fingerprint == "" {
		// A turn that joins nothing: its receipt still names its body.
		h.Fingerprint = identity.Fingerprint(tc.svc.secret, identity.Scope(tc.tenant, turn.KeyID), provider.Responses.Operation(), turn.RequestSHA256)
	}
	h.Conversation = &receipt.Conversation{ID: turn.Conversation, ResponseID: turn.ResponseID, PreviousResponseID: turn.Parent,
		Turn: turn.Depth, Try: turn.Try}
	if tc.stateful {
		// The conversation lives upstream: never hedged, never
		// continued by prefill.
		h.Request.Stateful, h.Request.NoContinuation = true, true
	}
}

// turnRequest is the neutral request for a turn: the conversation so far,
// then the new input, under this request's instructions. It also returns
// the conversation's items before the turn.
func turnRequest(req *provider.ResponsesRequest, history []*ledger.Turn) (*provider.Request, []provider.Item, error) {
	items, err := HistoryItems(history)
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

// HistoryItems are the items of a chain of done turns: each turn's input,
// then its answer.
func HistoryItems(history []*ledger.Turn) ([]provider.Item, error) {
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

// shellOf rebuilds a turn's response shell from its stored request.
func (s *Service) shellOf(turn *ledger.Turn) *provider.ResponseShell {
	req, err := provider.ParseResponsesRequest(turn.Request)
	if err != nil {
		return &provider.ResponseShell{ID: turn.ResponseID, CreatedAt: turn.CreatedAt.Unix()}
	}
	shell := provider.ShellOf(req, turn.ResponseID, turn.CreatedAt.Unix())
	return &shell
}

// Outcome is what a finished try made of its turn, as the request path
// found it: the turn's state and the answer it keeps.
type Outcome struct {
	// State is ledger.TurnDone, TurnUnknown (the try could not tell
	// whether its answer was produced) or TurnFailed (nothing committed).
	State ledger.TurnState
	// Status and Response are the answer the turn keeps: a done turn's
	// response object, a failed one's error.
	Status   int
	Response []byte
	// Ambiguous is what an unknown try adds to the turn's ambiguous
	// count; KnownUncommitted, that nothing of it is anywhere.
	Ambiguous        int
	KnownUncommitted bool
}

// Settle writes what a finished try made of its turn. It runs before the
// clients get their last byte, so a client that continues the
// conversation finds the turn done.
func (tc *Try) Settle(o Outcome) {
	s := tc.svc
	next := *tc.Turn
	next.UpdatedAt = s.clock.Now()
	next.State, next.Status, next.Response = o.State, o.Status, o.Response
	if o.State == ledger.TurnUnknown {
		next.Ambiguous += o.Ambiguous
		if next.Ambiguous >= s.path.Policy().Conversations.MaxAmbiguous && o.KnownUncommitted {
			// The last try it may have, and nothing of it is anywhere:
			// the turn is given up now, so the conversation can go on
			// from its parent at once. (If a stateful provider may hold
			// the answer, the next arrival reconciles first.)
			next.State = ledger.TurnFailed
			next.Status, next.Response = giveUp(&next, s.goOnFrom(context.Background(), &next))
		}
	}
	ok, err := s.ledger.UpdateTurn(context.Background(), &next, tc.Turn.State, tc.Turn.Try)
	if err != nil || !ok {
		// The turn stays pending: the next arrival on it reads the try's
		// record and settles the turn from there (refreshTurn).
		s.log.Warn("could not settle a turn", "response_id", next.ResponseID, "request_id", next.RequestID, "updated", ok, "err", err)
		return
	}
	if next.State == ledger.TurnDone {
		s.metrics.ObserveTurn(tc.tenant, "assistant")
	}
	tc.Turn = &next
}

// UnknownError is what a client is told when the try ended not knowing
// whether the provider answered. ambiguous is what the try adds to the
// turn's ambiguous count; knownUncommitted, that nothing of it is
// anywhere.
func (tc *Try) UnknownError(ambiguous int, knownUncommitted bool) *api.Error {
	t := tc.Turn
	if knownUncommitted && t.Ambiguous+ambiguous >= tc.svc.path.Policy().Conversations.MaxAmbiguous {
		return api.Errorf(api.CodeOutcomeUnknown, "response %s was given up: %d of its attempts ended without an answer and nothing of them was committed; %s",
			t.ResponseID, t.Ambiguous+ambiguous, tc.svc.goOnFrom(context.Background(), t))
	}
	return api.Errorf(api.CodeOutcomeUnknown, "response %s: the provider may have committed this turn, but its reply was lost; "+
		"send the turn again (the same Idempotency-Key, or the same body): it is reconciled with the provider, never sent blind", t.ResponseID)
}
