package conversation

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/coord"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/sse"
)

// The turn ledger brought up to date: a turn a try left behind (its
// gateway stopped or crashed) settled from the try's record, and an
// unknown turn on a stateful route reconciled with the provider
// (docs/conversations.md).

// refreshTurn brings a pending turn up to date with its try's record: a
// gateway that stopped between the two commits, or crashed mid-try, left
// the turn behind. An unknown or failed turn is returned as it is.
func (s *Service) refreshTurn(ctx context.Context, turn *ledger.Turn) (*ledger.Turn, error) {
	turn, err := s.refreshPending(ctx, turn)
	if err != nil || turn.State != ledger.TurnUnknown || ReadUpstream(turn.Upstream).Conversation == "" {
		return turn, err
	}
	return s.reconcileTurn(ctx, turn)
}

// refreshPending is refreshTurn's first half: a pending turn's try's
// record says how it ended.
func (s *Service) refreshPending(ctx context.Context, turn *ledger.Turn) (*ledger.Turn, error) {
	if turn.State != ledger.TurnPending {
		return turn, nil
	}
	rec, err := s.ledger.Get(ctx, turnIdentity(turn))
	if errors.Is(err, ledger.ErrNotFound) {
		return turn, nil // not started, or released: the try can run
	}
	if err != nil {
		return nil, err
	}
	next := *turn
	next.UpdatedAt = s.clock.Now()
	switch rec.State {
	case ledger.InProgress:
		if !rec.LeaseUntil.Before(next.UpdatedAt) {
			return turn, nil
		}
		s.path.SettleRecord(ctx, rec)
		if rec, err = s.ledger.Get(ctx, turnIdentity(turn)); err != nil || rec.State == ledger.InProgress {
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
	return s.moveTurn(ctx, turn, &next)
}

// reconcileTurn settles an unknown turn on a stateful route by reading its
// upstream conversation: the answer committed there is adopted (done);
// absent, the turn committed nothing (failed: a retry of it runs it again).
// If the upstream cannot tell, the turn stays unknown.
func (s *Service) reconcileTurn(ctx context.Context, turn *ledger.Turn) (*ledger.Turn, error) {
	u := ReadUpstream(turn.Upstream)
	route := s.path.Policy().Route(u.Route)
	if route == nil {
		return turn, nil
	}
	var history []*ledger.Turn
	if turn.Parent != "" {
		turns, err := s.ledger.ConversationTurns(ctx, turn.Tenant, turn.Conversation)
		if err != nil {
			return nil, err
		}
		history = ledger.Chain(turns, turn.Parent)
	}
	items, err := HistoryItems(history)
	if err != nil {
		return nil, err
	}
	var input []provider.Item
	if err := json.Unmarshal(turn.Input, &input); err != nil {
		return nil, fmt.Errorf("stored input of %s: %w", turn.ResponseID, err)
	}
	r, err := s.reconcile(ctx, route, u.Conversation, items, input, u.ResponseID)
	if err != nil {
		s.log.Warn("could not reconcile a turn", "response_id", turn.ResponseID, "err", err)
		return turn, nil
	}
	if len(r.orphans) > 0 {
		_, _, _ = s.recordOrphans(ctx, turn, route, u.Conversation, r.orphans, 0)
	}
	next := *turn
	next.UpdatedAt = s.clock.Now()
	if r.found != nil {
		next.State = ledger.TurnDone
		next.Response = provider.EncodeResponsesObject(s.shellOf(turn), r.found, next.UpdatedAt.Unix())
	} else {
		next.State = ledger.TurnFailed
		u.SuspectUntil = s.clock.Now().Add(suspectFor).UnixMilli()
		next.Upstream, _ = json.Marshal(u)
		e := api.Errorf(api.CodeOutcomeUnknown, "response %s was not committed by the provider before its reply was lost; retry the turn", turn.ResponseID)
		var head *coord.Head
		head, next.Response = e.Render(provider.Responses, api.Meta{RequestID: turn.RequestID})
		next.Status = head.Status
		if turn.Ambiguous >= s.path.Policy().Conversations.MaxAmbiguous {
			next.Status, next.Response = giveUp(turn, s.goOnFrom(ctx, turn))
		}
	}
	return s.moveTurn(ctx, turn, &next)
}

// moveTurn writes next over turn if the turn has not moved on meanwhile,
// and returns what the turn is now.
func (s *Service) moveTurn(ctx context.Context, turn, next *ledger.Turn) (*ledger.Turn, error) {
	ok, err := s.ledger.UpdateTurn(ctx, next, turn.State, turn.Try)
	if err != nil {
		return nil, err
	}
	if !ok {
		return s.ledger.Turn(ctx, turn.Tenant, turn.ResponseID)
	}
	if next.State == ledger.TurnDone {
		s.metrics.ObserveTurn(next.Tenant, "assistant")
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

// sweepTip reads the upstream conversation of a done turn on a stateful
// route that may still receive a late commit, when the turn is its
// conversation's latest (so everything after it upstream is extra).
func (s *Service) sweepTip(ctx context.Context, turn *ledger.Turn) error {
	u := ReadUpstream(turn.Upstream)
	route := s.path.Policy().Route(u.Route)
	if route == nil || u.Conversation == "" || !u.suspect(s.clock.Now()) {
		return nil
	}
	turns, err := s.ledger.ConversationTurns(ctx, turn.Tenant, turn.Conversation)
	if err != nil {
		return err
	}
	for _, t := range turns {
		if t.Parent == turn.ResponseID && t.State.Live() && ReadUpstream(t.Upstream).Conversation == u.Conversation {
			return nil // not the tip: its continuation there reads it
		}
	}
	items, err := HistoryItems(ledger.Chain(turns, turn.ResponseID))
	if err != nil {
		return err
	}
	return s.sweep(ctx, route, u.Conversation, items, turn)
}
