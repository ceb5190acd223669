package receipt

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/identity"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/retry"
)

var update = flag.Bool("update", false, "rewrite golden receipts")

const (
	examplePath   = "../../examples/oncegate.yaml"
	referencePath = "../../examples/receipts/reference.json"
)

var created = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(msec int) time.Time { return created.Add(time.Duration(msec) * time.Millisecond) }

func loadExample(t testing.TB) *policy.Policy {
	t.Helper()
	p, err := policy.Load(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func header(inputTokens int64) Receipt {
	body := `{"model":"chat","stream":true,"max_tokens":1024,"messages":[{"role":"user","content":"Summarise the incident."}]}`
	canon, _ := identity.Canonicalize([]byte(body))
	return Receipt{RequestID: "01944f3e-8c00-7000-8000-000000000001", Tenant: "acme", Operation: "chat.completions",
		Model: "chat", KeySHA256: identity.SHA256Hex([]byte("acme\x00chat.completions\x00order-42")),
		RequestSHA256: identity.SHA256Hex(canon), CreatedAt: created, Deadline: created.Add(60 * time.Second), Stream: true,
		Request: Facts{EstimatedInputTokens: inputTokens, MaxOutputTokens: 1024, MaxDataBoundary: "external"}}
}

// step is one scripted attempt outcome, times in ms after created.
type step struct {
	start, firstByte, observed int
	kind                       gw.Kind
	cause                      gw.Cause
	status                     int
	retryAfterMS               int
	usage                      gw.Usage
}

func record(t testing.TB, alias *policy.Alias, h Receipt, steps []step) *Receipt {
	t.Helper()
	rc := NewRecorder(alias, h)
	d := rc.Start(retry.Admission{}, created)
	for i, s := range steps {
		if !d.Dispatches() {
			t.Fatalf("step %d: engine already decided %s", i+1, d)
		}
		o := Observation{StartedAt: at(s.start), ObservedAt: at(s.observed), Kind: s.kind, Cause: s.cause,
			HTTPStatus: s.status, Usage: s.usage, Breaker: BreakerState{State: "closed"}}
		if s.firstByte > 0 {
			fb := at(s.firstByte)
			o.FirstByteAt = &fb
		}
		if s.retryAfterMS > 0 {
			ra := time.Duration(s.retryAfterMS) * time.Millisecond
			o.RetryAfter = &ra
		}
		if s.kind == gw.KindOK {
			o.VisibleOutput, o.EmittedTokens = true, s.usage.OutputTokens
		}
		var err error
		if d, err = rc.Observe(o, retry.Admission{}); err != nil {
			t.Fatalf("step %d: %v", i+1, err)
		}
	}
	if err := rc.Seal(); err != nil {
		t.Fatal(err)
	}
	return rc.R
}

// Seed 001's reference sequence on alias chat: primary rate-limited at
// 1,100 ms with Retry-After 250 ms; primary unavailable at 1,450 ms; route
// budget spent; fallback from 1,650 ms succeeds.
var referenceSteps = []step{
	{start: 0, observed: 1100, kind: gw.KindRateLimited, status: 429, retryAfterMS: 250},
	{start: 1350, observed: 1450, kind: gw.KindUnavailable, status: 503},
	{start: 1650, firstByte: 2100, observed: 4650, kind: gw.KindOK, status: 200, usage: gw.Usage{InputTokens: 3100, OutputTokens: 600}},
}

func reference(t testing.TB) (*policy.Policy, *Receipt) {
	p := loadExample(t)
	return p, record(t, p.Alias("chat"), header(3100), referenceSteps)
}

func writeOrCompare(t *testing.T, path string, r *Receipt) {
	t.Helper()
	got, err := r.Indented()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/receipt -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale; run go test ./internal/receipt -update", path)
	}
}

func TestReferenceReceipt(t *testing.T) {
	p, r := reference(t)
	writeOrCompare(t, referencePath, r)
	if drifts := Verify(p, r); len(drifts) != 0 {
		t.Fatalf("reference drifts: %v", drifts)
	}
	a := r.Attempts
	if len(a) != 3 || !a[1].NotBefore.Equal(at(1350)) || !a[2].NotBefore.Equal(at(1650)) || a[2].Route != "external-fallback" {
		t.Fatalf("schedule: %+v", a)
	}
	if r.Terminal != "succeeded" || r.Totals.BillableTokens != 3700 || r.Totals.CostUSD != 0.01375 {
		t.Fatalf("terminal %s, totals %+v", r.Terminal, r.Totals)
	}
	if strings.Join(r.Totals.Providers, ",") != "vllm-private,openai" {
		t.Fatalf("providers %v", r.Totals.Providers)
	}
	// The committed file parses back to the same sealed receipt.
	data, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if drifts := Verify(p, back); len(drifts) != 0 {
		t.Fatalf("parsed reference drifts: %v", drifts)
	}
}

// mutation is a mutated copy of the reference receipt and the drift that
// verify must name for it.
type mutation struct {
	name  string
	want  DriftCode
	build func(t *testing.T, p *policy.Policy) *Receipt
}

// edit applies f to a fresh reference receipt and reseals it, so that only
// the mutation itself (not a stale digest) is wrong.
func edit(f func(r *Receipt)) func(t *testing.T, p *policy.Policy) *Receipt {
	return func(t *testing.T, p *policy.Policy) *Receipt {
		_, r := reference(t)
		f(r)
		if err := r.Seal(); err != nil {
			t.Fatal(err)
		}
		return r
	}
}

// relaxed records steps under a copy of alias chat whose engine is loosened
// by f, keeping the real policy digest: the receipt a misbehaving retry
// owner would write.
func relaxed(h Receipt, f func(*retry.Policy), steps []step) func(t *testing.T, p *policy.Policy) *Receipt {
	return func(t *testing.T, p *policy.Policy) *Receipt {
		alias := *p.Alias("chat")
		eng := *alias.Engine
		f(&eng)
		alias.Engine = &eng
		return record(t, &alias, h, steps)
	}
}

var mutations = []mutation{
	{"valid_success", "", edit(func(r *Receipt) {})},
	{"opaque_retry_owner", DriftRetryOwner, edit(func(r *Receipt) { r.RetryOwner = "provider_sdk" })},
	{"contract_drift", DriftContract, edit(func(r *Receipt) { r.Attempts[2].Release = "gpt-4o-2024-05-13" })},
	{"boundary_drift", DriftBoundary, edit(func(r *Receipt) { r.Request.MaxDataBoundary = "private" })},
	{"logical_request_drift", DriftLogicalRequest, edit(func(r *Receipt) {
		r.Attempts[1].RequestSHA256 = identity.SHA256Hex([]byte(`{"model":"chat","messages":[]}`))
	})},
	{"premature_fallback", DriftRouteOrder, edit(func(r *Receipt) {
		a := &r.Attempts[1]
		a.Route, a.Provider, a.UpstreamModel, a.Release, a.DataBoundary, a.Purpose = "external-fallback", "openai", "gpt-4o", "gpt-4o-2024-08-06", "external", "fallback"
		r.Attempts[2].RouteOrdinal, r.Attempts[2].Purpose = 2, "retry"
	})},
	{"non_retryable_retried", DriftNonRetryableRetried, edit(func(r *Receipt) {
		a := &r.Attempts[0]
		a.Kind, a.OutcomeClass, a.HTTPStatus, a.RetryAfterMS = "rejected", "non_retryable", 400, nil
	})},
	{"indeterminate_retried", DriftIndeterminateRetried, edit(func(r *Receipt) {
		a := &r.Attempts[1]
		a.Kind, a.OutcomeClass, a.HTTPStatus = "unknown_provider_acceptance", "indeterminate", 0
	})},
	{"attempt_budget", DriftAttemptBudget, relaxed(header(3100), func(e *retry.Policy) { e.MaxAttempts = 10 }, []step{
		{start: 0, observed: 1100, kind: gw.KindRateLimited, status: 429, retryAfterMS: 250},
		{start: 1350, observed: 1450, kind: gw.KindUnavailable, status: 503},
		{start: 1650, observed: 1700, kind: gw.KindUnavailable, status: 503},
		{start: 1900, observed: 1950, kind: gw.KindUnavailable, status: 502},
		{start: 2150, observed: 2200, kind: gw.KindUnavailable, status: 529},
		{start: 2400, firstByte: 2500, observed: 3000, kind: gw.KindOK, status: 200, usage: gw.Usage{InputTokens: 3100, OutputTokens: 600}},
	})},
	{"cost_budget", DriftCostBudget, relaxed(header(200000), func(e *retry.Policy) { e.MaxCost = 0 }, referenceSteps)},
	{"deadline", DriftDeadline, edit(func(r *Receipt) { r.Deadline = at(1600) })},
	{"route_exhaustion", DriftRoutesExhausted, func(t *testing.T, p *policy.Policy) *Receipt {
		r := record(t, p.Alias("chat"), header(3100), []step{
			{start: 0, observed: 1100, kind: gw.KindRateLimited, status: 429, retryAfterMS: 250},
			{start: 1350, observed: 1450, kind: gw.KindUnavailable, status: 503},
			{start: 1650, observed: 21650, kind: gw.KindTimeoutBeforeResponse, cause: gw.CauseFirstByteTimeout},
			{start: 21850, observed: 41850, kind: gw.KindTimeoutBeforeResponse, cause: gw.CauseFirstByteTimeout},
		})
		if r.Reason != string(gw.ReasonRoutesExhausted) {
			t.Fatalf("setup: want routes_exhausted, got %s", r.Reason)
		}
		extra := r.Attempts[3]
		extra.Ordinal, extra.RouteOrdinal, extra.Purpose = 5, 2, "retry"
		extra.NotBefore, extra.StartedAt, extra.ObservedAt = at(42050), at(42050), at(42800)
		extra.Kind, extra.OutcomeClass, extra.Cause, extra.HTTPStatus = "ok", "success", "", 200
		r.Attempts = append(r.Attempts, extra)
		r.Terminal, r.Reason = "succeeded", "completed"
		if err := r.Seal(); err != nil {
			t.Fatal(err)
		}
		return r
	}},
	// A gateway died with attempt 2 observed: recovery stopped the
	// request, although the engine would have retried. Valid.
	{"recovery_stop", "", edit(recoveredAfter(2, "indeterminate"))},
	{"recovery_stop_then_attempt", DriftDecision, edit(func(r *Receipt) {
		decisions := r.Decisions
		recoveredAfter(2, "indeterminate")(r)
		// An attempt after recovery's stop, and the engine's decisions.
		stop := r.Decisions[2]
		stop.AfterAttempt = 1
		r.Attempts = r.Attempts[:2:2]
		r.Decisions = append([]Decision{decisions[0], decisions[1]}, stop, decisions[2], decisions[3])
		r.Totals = r.ComputeTotals()
	})},
	{"recovery_stop_wrong_terminal", DriftTerminal, edit(func(r *Receipt) {
		recoveredAfter(2, "indeterminate")(r)
		r.Reason = "deadline"
	})},
	// A stream cut after 8 visible tokens and resumed, its first attempt
	// billed what Anthropic's message_start said (1 output token): sealed,
	// its cost consistent with its usage, and still below what the client
	// was shown.
	{"billed_below_shown", DriftBilledBelowShown, func(t *testing.T, p *policy.Policy) *Receipt {
		r := record(t, p.Alias("chat"), header(3100), []step{
			{start: 0, firstByte: 300, observed: 900, kind: gw.KindStreamInterruptedAfterOutput, status: 200,
				usage: gw.Usage{InputTokens: 3100, OutputTokens: 1}},
			{start: 900, firstByte: 1200, observed: 2400, kind: gw.KindOK, status: 200, usage: gw.Usage{InputTokens: 3110, OutputTokens: 40}},
		})
		a := &r.Attempts[0]
		a.VisibleOutput, a.EmittedTokens = true, 8
		if err := r.Seal(); err != nil {
			t.Fatal(err)
		}
		return r
	}},
	{"tampered_digest", DriftDigest, func(t *testing.T, p *policy.Policy) *Receipt {
		_, r := reference(t)
		r.Attempts[2].Usage.OutputTokens = 60 // billed less, digest not recomputed
		return r
	}},
}

// recoveredAfter cuts a receipt after attempt n and ends it as recovery
// does when the gateway died there: a stop of its own.
func recoveredAfter(n int, terminal string) func(r *Receipt) {
	return func(r *Receipt) {
		r.Attempts = r.Attempts[:n]
		r.Decisions = append(r.Decisions[:n:n], Decision{AfterAttempt: n, Action: "stop", Terminal: terminal, Reason: terminal, By: ByRecovery})
		r.Terminal, r.Reason = terminal, terminal
		r.Totals = r.ComputeTotals()
	}
}

func TestMutationsAreDetected(t *testing.T) {
	p := loadExample(t)
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			r := m.build(t, p)
			path := filepath.Join("testdata", "mutations", m.name+".json")
			writeOrCompare(t, path, r)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			parsed, err := Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			drifts := Verify(p, parsed)
			if m.want == "" {
				if len(drifts) != 0 {
					t.Fatalf("valid receipt drifts: %v", drifts)
				}
				return
			}
			if len(drifts) == 0 || drifts[0].Code != m.want {
				t.Fatalf("want first drift %s, got %v", m.want, drifts)
			}
		})
	}
}

func TestSealIsStableAndCoversEverything(t *testing.T) {
	_, r := reference(t)
	before := r.ReceiptSHA256
	if err := r.Seal(); err != nil || r.ReceiptSHA256 != before {
		t.Fatalf("resealing changed the digest (%v)", err)
	}
	r.Dedup.Replayed++
	if err := r.Seal(); err != nil || r.ReceiptSHA256 == before {
		t.Fatal("a replay count change must change receipt_sha256")
	}
}

// An attempt whose clock readings came back out of order — the wall
// clock stepped while it ran — is recorded with its times in order, and
// its receipt verifies.
func TestAttemptTimesStayInOrderWhenTheClockSteps(t *testing.T) {
	p := loadExample(t)
	r := record(t, p.Alias("chat"), header(3100), []step{
		{start: 1000, firstByte: 900, observed: 800, kind: gw.KindOK, status: 200, usage: gw.Usage{InputTokens: 3100, OutputTokens: 600}},
	})
	a := r.Attempts[0]
	if a.FirstByteAt == nil || a.FirstByteAt.Before(a.StartedAt) || a.ObservedAt.Before(*a.FirstByteAt) {
		t.Fatalf("started %v, first byte %v, observed %v", a.StartedAt, a.FirstByteAt, a.ObservedAt)
	}
	for _, d := range Verify(p, r) {
		if d.Code == DriftTimeOrder {
			t.Fatalf("verify: %s", d)
		}
	}
}
