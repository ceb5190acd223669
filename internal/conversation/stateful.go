package conversation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/quota"
	"github.com/oncegate/oncegate/internal/tokens"
)

// Turns on a stateful route (provider type openai-responses): the upstream
// keeps the conversation, in a conversation object the gateway creates and
// seeds with the conversation so far; each attempt sends only the turn's
// new input. An attempt whose reply was lost after the request left may
// have been committed upstream, so it is reconciled before anything else
// happens: the upstream conversation is read and compared with the
// gateway's turn ledger. See docs/conversations.md.

// UpstreamRecord is a turn's record of its stateful route (ledger.Turn's
// Upstream): the upstream conversation it went into.
type UpstreamRecord struct {
	Route        string `json:"route"`
	Conversation string `json:"conversation"`
	ResponseID   string `json:"response_id,omitempty"`
	// SuspectUntil (Unix ms): a try in this conversation was found not
	// committed, and a provider may still commit it late; until then the
	// conversation is read again before each turn, and extra copies are
	// removed as orphans.
	SuspectUntil int64 `json:"suspect_until,omitempty"`
}

// suspectFor is how long after a try was found not committed its provider
// might still commit it.
const suspectFor = time.Minute

func (u UpstreamRecord) suspect(now time.Time) bool { return u.SuspectUntil > now.UnixMilli() }

// ReadUpstream reads a turn's UpstreamRecord (none: the zero record).
func ReadUpstream(b []byte) UpstreamRecord {
	var u UpstreamRecord
	_ = json.Unmarshal(b, &u)
	return u
}

// UpstreamConversation returns the upstream conversation a turn goes into
// on route: the one its earlier tries went into; else its parent's, if the
// parent went there on the same route and the turn is the parent's first
// continuation (branch 0); otherwise a new one seeded with the
// conversation so far. A later continuation of the same response — a
// branch — cannot go into the parent's conversation: that went on with
// the first, and the model would read the first branch as this one's
// history. The turn's record of it is durable before anything is sent
// into it.
func (tc *Try) UpstreamConversation(ctx context.Context, route *policy.Route) (string, error) {
	parent := ReadUpstream(tc.parentUpstream).Conversation
	if u := ReadUpstream(tc.Turn.Upstream); u.Route == route.ID && u.Conversation != "" && (tc.Turn.Branch == 0 || u.Conversation != parent) {
		// (A branch never keeps its parent's conversation, which a turn
		// written before branches were numbered may name.)
		return u.Conversation, nil
	}
	var u UpstreamRecord
	if tc.Turn.Branch == 0 {
		u = ReadUpstream(tc.parentUpstream)
	}
	if u.Route == route.ID && u.Conversation != "" && u.suspect(tc.svc.clock.Now()) {
		// A try of an earlier turn may have been committed late: read the
		// conversation before adding to it.
		if err := tc.svc.sweep(ctx, route, u.Conversation, tc.history, tc.Turn); err != nil {
			return "", err
		}
	}
	if u.Route != route.ID || u.Conversation == "" {
		data, _, err := tc.svc.path.StateCall(ctx, route, http.MethodPost, "/conversations", map[string]any{"items": provider.Bare(tc.history)})
		if err != nil {
			return "", err
		}
		var created struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(data, &created); err != nil || created.ID == "" {
			return "", fmt.Errorf("the upstream answered no conversation id: %.200s", data)
		}
		u = UpstreamRecord{Route: route.ID, Conversation: created.ID}
	}
	u.ResponseID = ""
	next := *tc.Turn
	if prev := ReadUpstream(tc.Turn.Upstream); prev.Conversation == u.Conversation {
		u.SuspectUntil = max(u.SuspectUntil, prev.SuspectUntil)
	}
	next.Upstream, _ = json.Marshal(u)
	ok, err := tc.svc.ledger.UpdateTurn(ctx, &next, tc.Turn.State, tc.Turn.Try)
	if err != nil || !ok {
		return "", fmt.Errorf("record the upstream conversation: %v (updated %v)", err, ok)
	}
	tc.Turn = &next
	return u.Conversation, nil
}

// MarkSuspect notes on the turn that its upstream conversation may yet
// receive a late commit of a try found absent (kept with the turn when it
// settles).
func (tc *Try) MarkSuspect() {
	u := ReadUpstream(tc.Turn.Upstream)
	u.SuspectUntil = tc.svc.clock.Now().Add(suspectFor).UnixMilli()
	next := *tc.Turn
	next.Upstream, _ = json.Marshal(u)
	tc.Turn = &next
}

// Orphans is what one reading of a stateful conversation recorded of the
// copies of a turn it found beyond the first.
type Orphans struct {
	// Recorded is how many were recorded now (one found again is
	// recorded once).
	Recorded int
	// Cost is what those cost.
	Cost gw.NanoUSD
}

// Reconcile reads the try's upstream conversation on route after an
// attempt whose reply was lost after its request left: found is the
// turn's answer committed there, nil if the turn is absent. Copies of
// the turn beyond the first are recorded as orphans (each prompt tokens
// in) and removed upstream; orphans says what was recorded, nil when the
// reading found none. If not every copy could be removed, the turn is
// marked suspect: the next turn reads the conversation first.
func (tc *Try) Reconcile(ctx context.Context, route *policy.Route, prompt int64) (found *provider.Response, orphans *Orphans, err error) {
	u := ReadUpstream(tc.Turn.Upstream)
	r, err := tc.svc.reconcile(ctx, route, u.Conversation, tc.history, tc.Input, tc.UpstreamID)
	if err != nil {
		return nil, nil, err
	}
	if len(r.orphans) > 0 {
		orphans = &Orphans{}
		var clean bool
		orphans.Recorded, orphans.Cost, clean = tc.svc.recordOrphans(ctx, tc.Turn, route, u.Conversation, r.orphans, prompt)
		if !clean {
			tc.MarkSuspect()
		}
	}
	return r.found, orphans, nil
}

// sweep reads a stateful conversation whose tries may have been committed
// late and removes, as orphans, whatever it holds beyond the conversation
// so far (expected), attributing them to turn.
func (s *Service) sweep(ctx context.Context, route *policy.Route, conv string, expected []provider.Item, turn *ledger.Turn) error {
	r, err := s.reconcile(ctx, route, conv, expected, nil, "")
	if err != nil {
		return fmt.Errorf("read the upstream conversation: %w", err)
	}
	if len(r.orphans) > 0 {
		if _, _, clean := s.recordOrphans(ctx, turn, route, conv, r.orphans, 0); !clean {
			return errors.New("could not remove what the upstream conversation holds beyond the turn")
		}
	}
	return nil
}

// reconciled is what an upstream conversation holds of a turn.
type reconciled struct {
	found   *provider.Response // the first copy of the turn's answer; nil: absent
	orphans [][]provider.Item  // further copies, input and output items
}

// reconcile reads an upstream conversation and finds a turn in it: the
// items that follow the conversation so far (expected) are copies of the
// turn's input, each followed by its answer. The first copy is the
// turn's; any other is an orphan. Items that are neither are orphans too.
// knownID, when the reply named it, is looked up first: the response
// committed under it answers for the turn.
func (s *Service) reconcile(ctx context.Context, route *policy.Route, conv string, expected, input []provider.Item, knownID string) (*reconciled, error) {
	if conv == "" {
		return nil, errors.New("the turn has no upstream conversation")
	}
	items, err := s.listItems(ctx, route, conv)
	if err != nil {
		return nil, err
	}
	i := 0
	var extra []provider.Item
	for _, it := range items {
		if i < len(expected) && sameItem(it, expected[i]) {
			i++
			continue
		}
		extra = append(extra, it)
	}
	if i < len(expected) {
		return nil, fmt.Errorf("the upstream conversation %s lacks %d items the conversation holds", conv, len(expected)-i)
	}
	out := &reconciled{}
	for _, group := range splitTurns(extra) {
		if n := copyOf(group, input); out.found == nil && n > 0 && len(group) > n {
			out.found = provider.ResponseOf(group[n:])
			continue
		}
		out.orphans = append(out.orphans, group)
	}
	if out.found != nil && knownID != "" {
		if data, _, err := s.path.StateCall(ctx, route, http.MethodGet, "/responses/"+url.PathEscape(knownID), nil); err == nil {
			if r, _, err := provider.DecodeResponsesObject(data); err == nil && r.Text == out.found.Text {
				out.found = r
			}
		}
	}
	return out, nil
}

// listItems reads a whole upstream conversation, oldest first.
func (s *Service) listItems(ctx context.Context, route *policy.Route, conv string) ([]provider.Item, error) {
	var all []provider.Item
	after := ""
	for range 1000 {
		q := url.Values{"order": {"asc"}, "limit": {"100"}}
		if after != "" {
			q.Set("after", after)
		}
		data, _, err := s.path.StateCall(ctx, route, http.MethodGet, "/conversations/"+url.PathEscape(conv)+"/items?"+q.Encode(), nil)
		if err != nil {
			return nil, err
		}
		var page struct {
			Data    []provider.Item `json:"data"`
			HasMore bool            `json:"has_more"`
			LastID  string          `json:"last_id"`
		}
		if err := json.Unmarshal(data, &page); err != nil {
			return nil, fmt.Errorf("list items of %s: %w", conv, err)
		}
		all = append(all, page.Data...)
		if !page.HasMore || page.LastID == "" {
			return all, nil
		}
		after = page.LastID
	}
	return nil, fmt.Errorf("list items of %s: too many pages", conv)
}

// splitTurns cuts items into turns: a run of input items and the answer
// items after it (answer items with no input before them are a group of
// their own).
func splitTurns(items []provider.Item) [][]provider.Item {
	var out [][]provider.Item
	for i := 0; i < len(items); {
		j := i
		for j < len(items) && startsTurn(items[j]) {
			j++
		}
		for j < len(items) && !startsTurn(items[j]) {
			j++
		}
		out = append(out, items[i:j])
		i = j
	}
	return out
}

// copyOf reports how many items at the start of items are a copy of the
// turn's input (0: none).
func copyOf(items, input []provider.Item) int {
	if len(input) == 0 || len(items) < len(input) {
		return 0
	}
	for j := range input {
		if !sameItem(items[j], input[j]) {
			return 0
		}
	}
	return len(input)
}

// startsTurn reports whether an item is input rather than an answer.
func startsTurn(it provider.Item) bool {
	return it.Type == provider.ItemFunctionCallOutput || it.Type == provider.ItemMessage && it.Role != provider.RoleAssistant
}

// sameItem compares two items by what they say, not by their ids.
func sameItem(a, b provider.Item) bool {
	text := func(it provider.Item) string {
		s := ""
		for _, p := range it.Content {
			if p.Text != nil {
				s += *p.Text
			}
			if p.Refusal != nil {
				s += *p.Refusal
			}
			s += p.ImageURL
		}
		return s
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	return a.Type == b.Type && a.Role == b.Role && a.CallID == b.CallID && a.Name == b.Name &&
		str(a.Arguments) == str(b.Arguments) && str(a.Output) == str(b.Output) && text(a) == text(b)
}

// recordOrphans records orphaned copies, each with what it cost
// (estimated from its text: the upstream's item listing carries no usage)
// and charged to its tenant's day like an attempt (the provider billed
// it), and removes them from the upstream conversation. It returns how
// many it recorded now, what they cost, and whether every copy is gone
// upstream.
//
// A record comes before its removal, and a copy's items are removed last
// first, its input last: a removal that a crash, a cancelled client or a
// failed call interrupts leaves the copy's input at its head, so the next
// reading of the conversation still sees a copy of the turn — never an
// answer run on from the kept one — and records it again under the same
// upstream id, which the ledger keeps once.
func (s *Service) recordOrphans(ctx context.Context, turn *ledger.Turn, route *policy.Route, conv string, orphans [][]provider.Item, prompt int64) (int, gw.NanoUSD, bool) {
	// The clients may be gone; what was found must still be recorded and
	// removed, or it is found again as part of the kept answer.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), orphanCleanup)
	defer cancel()
	recorded, cost, clean := 0, gw.NanoUSD(0), true
	for _, group := range orphans {
		out := provider.ResponseOf(slices.DeleteFunc(slices.Clone(group), startsTurn))
		usage := gw.Usage{InputTokens: prompt, OutputTokens: tokens.Text(out.Text)}
		for _, tc := range out.ToolCalls {
			usage.OutputTokens += tokens.Text(tc.Name) + tokens.Text(tc.Arguments)
		}
		o := &ledger.Orphan{Tenant: turn.Tenant, Conversation: turn.Conversation, ResponseID: turn.ResponseID, UpstreamID: group[0].ID,
			Route: route.ID, InputTokens: usage.InputTokens, OutputTokens: usage.OutputTokens, Cost: int64(route.Price.Cost(usage)), At: s.clock.Now()}
		var added bool
		var err error
		if out.Text != "" || len(out.ToolCalls) > 0 {
			added, err = s.ledger.AddOrphan(ctx, o)
		}
		// else: a copy's input without its answer is what an interrupted
		// removal left of a copy already recorded (a provider appends a
		// turn's input and output together): no generation, nothing
		// billed — only removed.
		if err != nil {
			// Left upstream unrecorded: the next reading finds it again.
			s.log.Warn("could not record an orphan", "response_id", turn.ResponseID, "err", err)
			clean = false
			continue
		}
		if added {
			// An orphan is spend: the store charged its tenant's day with
			// the record; the live limits learn it too.
			recorded, cost = recorded+1, cost+gw.NanoUSD(o.Cost)
			s.spend.Settle(quota.Reservation{Tenant: o.Tenant, Day: gw.Day(o.At), ID: "orphan:" + o.Conversation + ":" + o.UpstreamID}, gw.NanoUSD(o.Cost))
			s.metrics.ObserveOrphan()
		}
		for i := len(group) - 1; i >= 0; i-- {
			it := group[i]
			if it.ID == "" {
				continue
			}
			if _, _, err := s.path.StateCall(ctx, route, http.MethodDelete, "/conversations/"+url.PathEscape(conv)+"/items/"+url.PathEscape(it.ID), nil); err != nil {
				s.log.Warn("could not remove an orphaned item upstream", "conversation", conv, "item", it.ID, "err", err)
				clean = false
				break // the rest stays, input first, for the next reading
			}
			if i == len(group)-1 && i > 0 {
				s.failpoint("between_orphan_item_removals")
			}
		}
	}
	return recorded, cost, clean
}

// orphanCleanup bounds recording and removing one reading's orphans.
const orphanCleanup = 30 * time.Second
