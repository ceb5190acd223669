package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/receipt"
)

// The invariant checks: what the mock counted, the ledger's receipts and
// the clients' outcomes, held against each other once the run is over
// (the other rows are in bounds.go, billing.go, stateful.go and
// keychurn.go).

// check reads the mock's counts, the ledger's receipts and the clients'
// outcomes, and fills the report's rows.
func check(ctx context.Context, rep *Report, outcomes []outcome, m *mock.Mock, pol *policy.Policy, g *gateway, st readStore) (*Report, error) {
	receipts := map[string]*receipt.Receipt{}
	for _, tn := range pol.Tenants {
		for after := ""; ; {
			page, err := st.Receipts(ctx, tn.ID, 500, after)
			if err != nil {
				return nil, fmt.Errorf("list receipts: %w", err)
			}
			for _, b := range page {
				r, err := receipt.Parse(b)
				if err != nil {
					return nil, err
				}
				// Stored receipts are sealed when they are read, as the
				// gateway and `oncegate receipts` do.
				if err := r.Seal(); err != nil {
					return nil, fmt.Errorf("seal receipt %s: %w", r.RequestID, err)
				}
				receipts[r.RequestID] = r
				after = r.RequestID
			}
			if len(page) < 500 {
				break
			}
		}
	}
	stats := m.Stats()
	// A request settled by a gateway that died before it rebuilt the
	// receipt has none stored yet: the API rebuilds it on demand, as it
	// does for any client that asks (docs/identity.md).
	onDemand := 0
	for id := range stats.ByRequestID {
		if receipts[id] != nil {
			continue
		}
		if r, err := fetchReceipt(ctx, g.url(), id); err == nil {
			receipts[id] = r
			onDemand++
		}
	}
	rep.Receipts = len(receipts)
	rep.Calls = stats.Requests
	example := rep.example

	// 1. Every upstream call is an attempt of a receipt, and every
	// attempt a call — but for attempts a kill cut between their durable
	// dispatch and their send.
	calls := Row{Invariant: "upstream calls = Σ receipt attempts"}
	var attempts, cut, unsent int64
	for id, r := range receipts {
		calls.Checked++
		sent, n := stats.ByRequestID[id].Requests, int64(len(r.Attempts))
		attempts += n
		// An attempt that failed before its request left is no call:
		// it never got a connection to send on (the gateway says
		// "upstream connect …": refused, or its deadline came first), or
		// the upstream conversation it needed could not be created. The
		// mock's count checks that claim: it must then see exactly the
		// other attempts. One cut while its request was being written
		// ("upstream write …") reached the provider whole only if the
		// cut came in the instant after its last byte: it may count.
		never, maybe := int64(0), int64(0)
		for _, a := range r.Attempts {
			switch {
			case a.Error == nil:
			case strings.HasPrefix(a.Error.Message, "upstream connect "), strings.HasPrefix(a.Error.Message, "create the upstream conversation"):
				never++
			case strings.HasPrefix(a.Error.Message, "upstream write "):
				maybe++
			}
		}
		unsent += never + maybe
		switch {
		case sent >= n-never-maybe && sent <= n-never:
			unsent -= sent - (n - never - maybe)
		case sent < n-never-maybe && r.Terminal == string(gw.TerminalIndeterminate):
			cut += n - never - maybe - sent
		default:
			calls.Violations++
			var errs []string
			for _, a := range r.Attempts {
				if a.Error != nil {
					errs = append(errs, fmt.Sprintf("attempt %d: %s", a.Ordinal, a.Error.Message))
				}
			}
			example("%s: the provider saw %d calls, the receipt has %d attempts (terminal %s; %s)", id, sent, n, r.Terminal, strings.Join(errs, "; "))
		}
	}
	for id, c := range stats.ByRequestID {
		if receipts[id] == nil {
			calls.Violations++
			example("%s: %d upstream calls and no receipt", id, c.Requests)
		}
	}
	calls.Note = fmt.Sprintf("%d calls, %d attempts; %d dispatched attempts cut by a kill before they were sent, %d that could not leave; %d receipts rebuilt on demand",
		rep.Calls, attempts, cut, unsent, onDemand)
	rep.Rows = append(rep.Rows, calls)

	// 2. At most one committed answer per logical request.
	one := Row{Invariant: "at most one committed answer per logical request"}
	for id, r := range receipts {
		one.Checked++
		ok := 0
		for _, a := range r.Attempts {
			if a.Kind == string(gw.KindOK) {
				ok++
			}
		}
		if ok > 1 {
			one.Violations++
			example("%s: %d successful attempts", id, ok)
		}
	}
	rep.Rows = append(rep.Rows, one)

	// 3. Every receipt passes verify: no attempt after a terminal, a
	// deadline, a budget; routes in order; digests whole.
	ver := Row{Invariant: "every receipt passes oncegate verify"}
	for id, r := range receipts {
		ver.Checked++
		if drifts := receipt.Verify(pol, r); len(drifts) > 0 {
			ver.Violations++
			example("%s: %s\n    %s", id, drifts[0], story(ctx, st, r))
		}
	}
	rep.Rows = append(rep.Rows, ver)
	rep.Rows = append(rep.Rows, bounds(receipts, outcomes, pol, example)...)

	// 4 and 5 need the gateway: every answered request has its receipt,
	// and every answer read is one clean generation.
	has := Row{Invariant: "every answered logical request has its receipt"}
	clean := Row{Invariant: "every answer a client read is one clean generation"}
	for i, o := range outcomes {
		if o.ok {
			rep.Answered++
		}
		if o.kind == kindConversation || o.kind == kindStateful {
			// Every answered turn: its receipt, and the answer to the
			// conversation as it stood, generated once.
			var history []string
			for k, tn := range o.turns {
				history = append(history, tn.input)
				has.Checked++
				if tn.requestID == "" || receipts[tn.requestID] == nil {
					has.Violations++
					example("conversation %d turn %d: answered, request id %q, no receipt", i, k+1, tn.requestID)
				}
				clean.Checked++
				if want := mock.AnswerTo(0, "", history, tokens); tn.text != want {
					clean.Violations++
					example("conversation %d turn %d: read %q, one generation is %q", i, k+1, tn.text, want)
				}
				history = append(history, tn.text)
			}
			continue
		}
		if !o.ok {
			continue
		}
		has.Checked++
		if o.requestID == "" || receipts[o.requestID] == nil {
			has.Violations++
			example("request %d (%s): answered, request id %q, no receipt", i, o.kind, o.requestID)
		}
		clean.Checked++
		if want := mock.AnswerFor(0, o.prompt, tokens); o.text != want {
			clean.Violations++
			example("request %d (%s): read %q, one generation is %q", i, o.kind, o.text, want)
		}
	}
	rep.Rows = append(rep.Rows, has, clean, billedShown(receipts, outcomes, example))

	// 6. Conversations: every committed turn has as many assistant turns
	// as user turns before it, along its chain, and no user action — one
	// body on one response; every turn of the workload says something
	// new — has two committed turns. (A response may be continued many
	// times, by different user actions: a branch is not a duplicate.)
	turns := Row{Invariant: "conversations: assistant ÷ user turns = 1, one turn per user action"}
	actions := map[string]string{}
	for id, r := range receipts {
		c := r.Conversation
		if c == nil || r.Terminal != string(gw.TerminalSucceeded) {
			continue
		}
		turns.Checked++
		if c.UserTurns != c.AssistantTurns || c.UserTurns != c.Turn {
			turns.Violations++
			example("%s: turn %d with %d user and %d assistant turns", id, c.Turn, c.UserTurns, c.AssistantTurns)
		}
		action := r.Tenant + "/" + c.PreviousResponseID + "/" + r.RequestSHA256
		if other, ok := actions[action]; ok && other != c.ResponseID {
			turns.Violations++
			example("%s: one user action on response %q committed twice, as %s and %s", id, c.PreviousResponseID, other, c.ResponseID)
		}
		actions[action] = c.ResponseID
	}
	rep.Rows = append(rep.Rows, turns)
	prov, err := providerConversations(ctx, receipts, outcomes, m, st, example)
	if err != nil {
		return nil, err
	}
	rep.Rows = append(rep.Rows, prov)

	// 7. Every key, POSTed again after the run: an answer comes back
	// byte for byte, anything else as it ended — and no provider is
	// called again (no indeterminate request is re-sent blind).
	replay := Row{Invariant: "acknowledged answers replay byte for byte"}
	blind := Row{Invariant: "re-POSTs after the run reach no provider"}
	before := m.Requests()
	ranAgain, ranAgainCalls := 0, int64(0)
	for i, o := range outcomes {
		if o.key == "" || o.requestID == "" || receipts[o.requestID] == nil {
			continue // the gateway never took this key (a kill refused the connection)
		}
		blind.Checked++
		r := receipts[o.requestID]
		calls := m.Requests()
		status, b, h, err := post(ctx, g.url(), o.prof, o.key, "/v1/chat/completions", chatBody(o.prompt, o.stream, o.prof))
		if err != nil {
			return nil, fmt.Errorf("re-POST %s: %w", o.key, err)
		}
		if r.Terminal == string(gw.TerminalIndeterminate) && status != 502 {
			blind.Violations++
			example("request %d: indeterminate, re-POST answered %d", i, status)
		}
		// A request that sent nothing, or was cancelled before any
		// output was shown, released its key (docs/identity.md): the
		// re-POST is a new request, and may be sent. Any other must
		// replay what it ended with.
		if sent := m.Requests() - calls; sent > 0 {
			if len(r.Attempts) == 0 || r.Terminal == string(gw.TerminalCancelled) {
				ranAgain++
				ranAgainCalls += sent
			} else {
				blind.Violations++
				example("request %d (%s): ended %s/%s, and its re-POST made %d upstream calls (%d %s)", i, o.kind, r.Terminal, r.Reason, sent,
					status, h.Get("X-Oncegate-Dedup"))
			}
		}
		if !o.ok {
			continue
		}
		replay.Checked++
		text, _ := answerText(b, o.stream)
		if status != 200 || h.Get("X-Oncegate-Dedup") != "replayed" || (!o.stream && !bytes.Equal(b, o.body)) || text != o.text {
			replay.Violations++
			example("request %d (%s): replay %d %s, %d bytes vs %d", i, o.kind, status, h.Get("X-Oncegate-Dedup"), len(b), len(o.body))
		}
	}
	// A stateful conversation's keyed first turn, sent again, is its
	// first answer.
	for i, o := range outcomes {
		if o.kind != kindStateful || len(o.turns) == 0 {
			continue
		}
		blind.Checked++
		replay.Checked++
		first := map[string]any{"model": statefulModel, "input": o.turns[0].input}
		if o.stream {
			first["stream"] = true
		}
		body, _ := json.Marshal(first)
		calls := m.Requests()
		status, b, h, err := post(ctx, g.url(), o.prof, statefulKey(i, 1), "/v1/responses", body)
		if err != nil {
			return nil, fmt.Errorf("re-POST %s: %w", statefulKey(i, 1), err)
		}
		if sent := m.Requests() - calls; sent > 0 {
			blind.Violations++
			example("stateful conversation %d: its answered first turn, sent again, made %d upstream calls", i, sent)
		}
		if id := responseID(b, o.stream); status != 200 || h.Get("X-Oncegate-Dedup") != "replayed" || id != o.turns[0].responseID {
			replay.Violations++
			example("stateful conversation %d: its first turn sent again answered %d %s, response %q, not %q",
				i, status, h.Get("X-Oncegate-Dedup"), id, o.turns[0].responseID)
		}
	}
	blind.Note = fmt.Sprintf("%d upstream calls in all; %d of them from %d keys sent again after their request released them (it sent nothing, or was cancelled before any output)",
		m.Requests()-before, ranAgainCalls, ranAgain)
	rep.Rows = append(rep.Rows, replay, blind)
	return rep, nil
}

// story is a receipt's attempts and decisions and its request's event
// log, in a line each: what a violation is diagnosed from.
func story(ctx context.Context, st readStore, r *receipt.Receipt) string {
	var b strings.Builder
	fmt.Fprintf(&b, "model %s, tenant %s, stream %v, terminal %s/%s", r.Model, r.Tenant, r.Stream, r.Terminal, r.Reason)
	for _, a := range r.Attempts {
		fmt.Fprintf(&b, "\n    attempt %d %s %s/%s cost %.9f reserved %.9f", a.Ordinal, a.Route, a.OutcomeClass, a.Kind, a.CostUSD, a.ReservedUSD)
		if a.Error != nil {
			fmt.Fprintf(&b, " (%s)", a.Error.Message)
		}
	}
	for _, d := range r.Decisions {
		fmt.Fprintf(&b, "\n    after %d: %s %s %s/%s", d.AfterAttempt, d.Action, d.Route, d.Terminal, d.Reason)
	}
	evs, err := st.Events(ctx, r.RequestID)
	if err != nil {
		return b.String() + "\n    events: " + err.Error()
	}
	for _, e := range evs {
		fmt.Fprintf(&b, "\n    event %d gen %d %s %s", e.Seq, e.Generation, e.Type, firstLine(e.Data))
	}
	return b.String()
}

// fetchReceipt asks the gateway for a receipt, as a client would: under
// each tenant's key until one owns it.
func fetchReceipt(ctx context.Context, base, id string) (r *receipt.Receipt, err error) {
	for _, key := range []string{apiKey, privateKey, cappedKey} {
		if r, err = fetchReceiptAs(ctx, base, id, key); err == nil {
			return r, nil
		}
	}
	return nil, err
}

func fetchReceiptAs(ctx context.Context, base, id, key string) (*receipt.Receipt, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/receipts/"+id, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != 200 {
		return nil, fmt.Errorf("GET receipt %s: %d %s", id, res.StatusCode, firstLine(b))
	}
	r, err := receipt.Parse(b)
	if err != nil {
		return nil, err
	}
	return r, r.Seal()
}
