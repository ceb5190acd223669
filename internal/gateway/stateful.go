package gateway

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
	"github.com/oncegate/oncegate/internal/upstream"
)

// Turns on a stateful route (provider type openai-responses): the upstream
// keeps the conversation, in a conversation object the gateway creates and
// seeds with the conversation so far; each attempt sends only the turn's
// new input. An attempt whose reply was lost after the request left may
// have been committed upstream, so it is reconciled before anything else
// happens: the upstream conversation is read and compared with the
// gateway's turn ledger. See docs/conversations.md.

// upstreamRecord is a turn's record of its stateful route (ledger.Turn's
// Upstream): the upstream conversation it went into.
type upstreamRecord struct {
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

func (u upstreamRecord) suspect(now time.Time) bool { return u.SuspectUntil > now.UnixMilli() }

func readUpstream(b []byte) upstreamRecord {
	var u upstreamRecord
	_ = json.Unmarshal(b, &u)
	return u
}

// stateClient reads and edits a stateful route's stored state: calls that
// generate nothing, outside the attempts.
func (g *Gateway) stateCall(ctx context.Context, route *policy.Route, method, path string, body any) ([]byte, int, error) {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return nil, 0, err
		}
	}
	resp, err := g.cur.Load().clients[route.Provider.ID].Do(ctx, &upstream.Request{Method: method, Path: path, Body: b, Header: http.Header{}})
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	data, err := upstream.ReadAll(resp.Body, g.policy().Limits.MaxResponseBytes)
	if err != nil {
		return nil, resp.Status, err
	}
	if resp.Status/100 != 2 {
		ue := provider.ParseError(resp.Status, data)
		return data, resp.Status, fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.Status, g.scrub(ue.Message))
	}
	return data, resp.Status, nil
}

// statefulAttempt makes one attempt of a turn on a stateful route.
func (c *call) statefulAttempt(ctx context.Context, res *attemptResult, n int) *attemptResult {
	route := res.route
	conv, err := c.upstreamConversation(ctx, route)
	if err != nil {
		// Nothing was generated: the turn's input never reached a model.
		return c.observe(res, gw.KindTimeoutBeforeResponse, "", "create the upstream conversation: "+err.Error())
	}
	tc := c.turn
	body, err := provider.BuildResponsesUpstream(tc.req, tc.input, route.Model, conv, c.stream, c.outputLimit(route, false))
	if err != nil {
		return c.observe(res, gw.KindInvalidRequest, "", err.Error())
	}
	hdr := http.Header{}
	// One key for every try of the turn: an upstream that honours it
	// dedupes them itself.
	hdr.Set("Idempotency-Key", "og-"+tc.turn.ResponseID)
	return c.exchange(ctx, res, &provider.Outbound{Path: "/responses", Body: body, PromptTokens: c.in.PromptTokens}, hdr)
}

// upstreamConversation returns the upstream conversation a turn goes into
// on route: the one its earlier tries went into; else its parent's, if the
// parent went there on the same route and the turn is the parent's first
// continuation (branch 0); otherwise a new one seeded with the
// conversation so far. A later continuation of the same response — a
// branch — cannot go into the parent's conversation: that went on with
// the first, and the model would read the first branch as this one's
// history. The turn's record of it is durable before anything is sent
// into it.
func (c *call) upstreamConversation(ctx context.Context, route *policy.Route) (string, error) {
	tc := c.turn
	parent := readUpstream(tc.parentUpstream).Conversation
	if u := readUpstream(tc.turn.Upstream); u.Route == route.ID && u.Conversation != "" && (tc.turn.Branch == 0 || u.Conversation != parent) {
		// (A branch never keeps its parent's conversation, which a turn
		// written before branches were numbered may name.)
		return u.Conversation, nil
	}
	var u upstreamRecord
	if tc.turn.Branch == 0 {
		u = readUpstream(tc.parentUpstream)
	}
	if u.Route == route.ID && u.Conversation != "" && u.suspect(c.g.clock.Now()) {
		// A try of an earlier turn may have been committed late: read the
		// conversation before adding to it.
		if err := c.g.sweep(ctx, route, u.Conversation, tc.history, tc.turn); err != nil {
			return "", err
		}
	}
	if u.Route != route.ID || u.Conversation == "" {
		data, _, err := c.g.stateCall(ctx, route, http.MethodPost, "/conversations", map[string]any{"items": provider.Bare(tc.history)})
		if err != nil {
			return "", err
		}
		var created struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(data, &created); err != nil || created.ID == "" {
			return "", fmt.Errorf("the upstream answered no conversation id: %.200s", data)
		}
		u = upstreamRecord{Route: route.ID, Conversation: created.ID}
	}
	u.ResponseID = ""
	next := *tc.turn
	if prev := readUpstream(tc.turn.Upstream); prev.Conversation == u.Conversation {
		u.SuspectUntil = max(u.SuspectUntil, prev.SuspectUntil)
	}
	next.Upstream, _ = json.Marshal(u)
	ok, err := c.g.ledger.UpdateTurn(ctx, &next, tc.turn.State, tc.turn.Try)
	if err != nil || !ok {
		return "", fmt.Errorf("record the upstream conversation: %v (updated %v)", err, ok)
	}
	tc.turn = &next
	return u.Conversation, nil
}

// ambiguousOnStateful reports whether a failed attempt on a stateful route
// may have been committed upstream: its request left and its reply was
// lost (a read timeout, a reset, a 502 or 504 from the infrastructure in
// front, a stream that broke).
func ambiguousOnStateful(res *attemptResult) bool {
	switch res.kind {
	case gw.KindStreamInterruptedAfterOutput:
		return true
	case gw.KindTimeoutBeforeResponse, gw.KindUnavailable:
		switch st := res.obs.HTTPStatus; {
		case st == 0:
			return res.sent
		case st/100 == 2, st == http.StatusBadGateway, st == http.StatusGatewayTimeout:
			return true
		}
	}
	return false
}

// reconcileAttempt settles an ambiguous attempt on a stateful route by
// asking the upstream what it holds, before the engine decides anything:
// found, the answer is adopted and the attempt succeeded; absent, nothing
// was committed and the attempt is an ordinary retryable failure; copies
// beyond the first are removed upstream and recorded as orphans. Past
// max_ambiguous such attempts, or when the upstream cannot tell, it stays
// indeterminate and the turn ends unknown.
func (c *call) reconcileAttempt(ctx context.Context, res *attemptResult) *attemptResult {
	if !ambiguousOnStateful(res) {
		return res
	}
	tc := c.turn
	prior := tc.turn.Ambiguous
	for _, a := range c.rec.R.Attempts {
		if a.Reconciled == "absent" || a.Reconciled == "unknown" {
			prior++
		}
	}
	u := readUpstream(tc.turn.Upstream)
	r, err := c.g.reconcile(ctx, res.route, u.Conversation, tc.history, tc.input, tc.upstreamID)
	if err == nil && len(r.orphans) > 0 {
		var clean bool
		var cost gw.NanoUSD
		res.obs.Orphans, cost, clean = c.g.recordOrphans(ctx, tc.turn, res.route, u.Conversation, r.orphans, c.in.PromptTokens)
		res.obs.OrphansCostUSD = cost.USD()
		if !clean {
			c.markSuspect() // the next turn reads the conversation first
		}
	}
	switch {
	case err != nil:
		c.g.log.Warn("could not reconcile a turn", "response_id", tc.turn.ResponseID, "request_id", c.id, "err", err)
		res.obs.Reconciled = "unknown"
		return c.observe(res, gw.KindUnknownProviderAcceptance, "", res.detail+"; reconcile failed: "+err.Error())
	case r.found != nil:
		res.obs.Reconciled = "found"
		return c.adopt(res, r.found)
	case prior+1 >= c.g.policy().Conversations.MaxAmbiguous:
		res.obs.Reconciled = "absent"
		c.markSuspect()
		return c.observe(res, gw.KindUnknownProviderAcceptance, "", res.detail+"; not committed upstream, and the turn has had its ambiguous tries")
	default:
		// Nothing was committed: the failure is what it looked like, and
		// the engine decides on it as on any other — except that a route
		// that just answered the lookup is not silent, so a first-byte
		// timeout does not rule it out for the retry.
		res.obs.Reconciled = "absent"
		c.markSuspect()
		if res.obs.Cause == gw.CauseFirstByteTimeout {
			res.obs.Cause = ""
		}
		return res
	}
}

// markSuspect notes on the turn that its upstream conversation may yet
// receive a late commit of a try found absent (kept with the turn when it
// settles).
func (c *call) markSuspect() {
	tc := c.turn
	u := readUpstream(tc.turn.Upstream)
	u.SuspectUntil = c.g.clock.Now().Add(suspectFor).UnixMilli()
	next := *tc.turn
	next.Upstream, _ = json.Marshal(u)
	tc.turn = &next
}

// sweep reads a stateful conversation whose tries may have been committed
// late and removes, as orphans, whatever it holds beyond the conversation
// so far (expected), attributing them to turn.
func (g *Gateway) sweep(ctx context.Context, route *policy.Route, conv string, expected []provider.Item, turn *ledger.Turn) error {
	r, err := g.reconcile(ctx, route, conv, expected, nil, "")
	if err != nil {
		return fmt.Errorf("read the upstream conversation: %w", err)
	}
	if len(r.orphans) > 0 {
		if _, _, clean := g.recordOrphans(ctx, turn, route, conv, r.orphans, 0); !clean {
			return errors.New("could not remove what the upstream conversation holds beyond the turn")
		}
	}
	return nil
}

// adopt makes an answer the upstream committed, whose reply was lost, the
// attempt's answer: whole for a JSON turn; for a stream, what the client
// has not seen yet of it.
func (c *call) adopt(res *attemptResult, found *provider.Response) *attemptResult {
	found.Model = firstNonEmpty(found.Model, res.route.Model)
	// The committed answer is billed whole, by estimate: never below what
	// the attempt's own stream counted before its reply was lost.
	usage := gw.Usage{InputTokens: c.in.PromptTokens, OutputTokens: max(estimateOutput(found), res.obs.Usage.OutputTokens)}
	res.obs.Usage, res.obs.UsageEstimated = usage, true
	if !c.stream {
		res.obs.VisibleOutput, res.obs.EmittedTokens = true, usage.OutputTokens
		res.body = c.encodeResponse(found)
		return c.observe(res, gw.KindOK, "", "")
	}
	o := c.out
	delivered := o.delivered.String()
	if o.started && (len(found.ToolCalls) > 0 || len(delivered) > len(found.Text) || found.Text[:len(delivered)] != delivered) {
		res.obs.Reconciled = "unknown"
		return c.observe(res, gw.KindUnknownProviderAcceptance, "", "the committed answer does not continue what the client was shown")
	}
	a := &attemptStream{route: res.route, ordinal: res.ordinal, claimed: true, model: res.route.Model}
	if rest := found.Text[len(delivered):]; rest != "" {
		o.emit(&provider.Event{Kind: provider.EvText, Text: rest}, a)
	}
	for i, tc := range found.ToolCalls {
		o.emit(&provider.Event{Kind: provider.EvToolStart, ToolIndex: i, ToolID: tc.ID, ToolName: tc.Name}, a)
		o.emit(&provider.Event{Kind: provider.EvToolArgs, ToolIndex: i, Args: tc.Arguments}, a)
	}
	if o.enc == nil {
		o.begin(a)
	}
	o.flush()
	// Shown of this attempt: what its stream relayed before it broke, and
	// the rest sent now.
	res.obs.VisibleOutput, res.obs.EmittedTokens = true, res.obs.EmittedTokens+a.emitted
	res.obs.Usage.OutputTokens = max(res.obs.Usage.OutputTokens, res.obs.EmittedTokens)
	res.finish = found.Finish
	return c.observe(res, gw.KindOK, "", "")
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
func (g *Gateway) reconcile(ctx context.Context, route *policy.Route, conv string, expected, input []provider.Item, knownID string) (*reconciled, error) {
	if conv == "" {
		return nil, errors.New("the turn has no upstream conversation")
	}
	items, err := g.listItems(ctx, route, conv)
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
		if data, _, err := g.stateCall(ctx, route, http.MethodGet, "/responses/"+url.PathEscape(knownID), nil); err == nil {
			if r, _, err := provider.DecodeResponsesObject(data); err == nil && r.Text == out.found.Text {
				out.found = r
			}
		}
	}
	return out, nil
}

// listItems reads a whole upstream conversation, oldest first.
func (g *Gateway) listItems(ctx context.Context, route *policy.Route, conv string) ([]provider.Item, error) {
	var all []provider.Item
	after := ""
	for range 1000 {
		q := url.Values{"order": {"asc"}, "limit": {"100"}}
		if after != "" {
			q.Set("after", after)
		}
		data, _, err := g.stateCall(ctx, route, http.MethodGet, "/conversations/"+url.PathEscape(conv)+"/items?"+q.Encode(), nil)
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
func (g *Gateway) recordOrphans(ctx context.Context, turn *ledger.Turn, route *policy.Route, conv string, orphans [][]provider.Item, prompt int64) (int, gw.NanoUSD, bool) {
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
			Route: route.ID, InputTokens: usage.InputTokens, OutputTokens: usage.OutputTokens, Cost: int64(route.Price.Cost(usage)), At: g.clock.Now()}
		var added bool
		var err error
		if out.Text != "" || len(out.ToolCalls) > 0 {
			added, err = g.ledger.AddOrphan(ctx, o)
		}
		// else: a copy's input without its answer is what an interrupted
		// removal left of a copy already recorded (a provider appends a
		// turn's input and output together): no generation, nothing
		// billed — only removed.
		if err != nil {
			// Left upstream unrecorded: the next reading finds it again.
			g.log.Warn("could not record an orphan", "response_id", turn.ResponseID, "err", err)
			clean = false
			continue
		}
		if added {
			// An orphan is spend: the store charged its tenant's day with
			// the record; the live limits learn it too.
			recorded, cost = recorded+1, cost+gw.NanoUSD(o.Cost)
			g.tenants.Settle(quota.Reservation{Tenant: o.Tenant, Day: gw.Day(o.At), ID: "orphan:" + o.Conversation + ":" + o.UpstreamID}, gw.NanoUSD(o.Cost))
			g.metrics.ObserveOrphan()
		}
		for i := len(group) - 1; i >= 0; i-- {
			it := group[i]
			if it.ID == "" {
				continue
			}
			if _, _, err := g.stateCall(ctx, route, http.MethodDelete, "/conversations/"+url.PathEscape(conv)+"/items/"+url.PathEscape(it.ID), nil); err != nil {
				g.log.Warn("could not remove an orphaned item upstream", "conversation", conv, "item", it.ID, "err", err)
				clean = false
				break // the rest stays, input first, for the next reading
			}
			if i == len(group)-1 && i > 0 {
				failpoint("between_orphan_item_removals")
			}
		}
	}
	return recorded, cost, clean
}

// orphanCleanup bounds recording and removing one reading's orphans.
const orphanCleanup = 30 * time.Second
