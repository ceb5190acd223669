package receipt

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/retry"
)

var boundaries = []string{"local", "private", "external"}

// genPolicy writes a random but valid configuration and compiles it, so the
// property runs through the same path as a real file.
func genPolicy(t *rapid.T) *policy.Policy {
	n := rapid.IntRange(1, 4).Draw(t, "routes")
	aliasMax := rapid.IntRange(0, 2).Draw(t, "alias_max")
	var b strings.Builder
	b.WriteString("tenants: [{id: t, api_key_env: K}]\nproviders: [{id: p, type: openai, base_url: \"http://127.0.0.1:9/v1\"}]\nroutes:\n")
	var ids []string
	for i := 0; i < n; i++ {
		bd := rapid.IntRange(0, aliasMax).Draw(t, "boundary")
		cont := rapid.SampledFrom([]string{"none", "assistant_prefill", "prefix_flag"}).Draw(t, "cont")
		fmt.Fprintf(&b, "  - {id: r%d, provider: p, model: m%d, behavior_class: c, data_boundary: %s, max_attempts: %d, "+
			"capabilities: {max_context_tokens: %d, continuation: %s}, price: {input_usd_per_mtok: %d, output_usd_per_mtok: %d}}\n",
			i, i, boundaries[bd], rapid.IntRange(1, 3).Draw(t, "route_max"), rapid.IntRange(1000, 200000).Draw(t, "ctx"), cont,
			rapid.IntRange(0, 5).Draw(t, "in"), rapid.IntRange(0, 20).Draw(t, "out"))
		ids = append(ids, fmt.Sprintf("r%d", i))
	}
	fmt.Fprintf(&b, "models:\n  - name: chat\n    routes: [%s]\n    require: {max_data_boundary: %s}\n", strings.Join(ids, ", "), boundaries[aliasMax])
	fmt.Fprintf(&b, "    retry: {max_attempts: %d, base_delay: %dms, max_delay: %dms, jitter: %s, max_cost_usd: %v}\n",
		rapid.IntRange(1, 8).Draw(t, "max_attempts"), rapid.IntRange(0, 300).Draw(t, "base"), 300+rapid.IntRange(0, 2000).Draw(t, "max"),
		rapid.SampledFrom([]string{"full", "none"}).Draw(t, "jitter"), rapid.SampledFrom([]float64{0, 0.01, 0.1}).Draw(t, "max_cost"))
	fmt.Fprintf(&b, "    stream: {after_output: %s}\n", rapid.SampledFrom([]string{"resume", "restart", "stop"}).Draw(t, "after_output"))
	b.WriteString("    accept_unreachable_routes: true\n") // a cap may rule routes out: the receipts must verify all the same
	cfg, err := config.Parse("gen.yaml", []byte(b.String()))
	if err != nil {
		t.Fatalf("generated config: %v\n%s", err, b.String())
	}
	p, err := policy.Compile(cfg)
	if err != nil {
		t.Fatalf("generated policy: %v\n%s", err, b.String())
	}
	return p
}

var kinds = []gw.Kind{gw.KindTimeoutBeforeResponse, gw.KindRateLimited, gw.KindUnavailable, gw.KindUnavailable,
	gw.KindOK, gw.KindStreamInterruptedAfterOutput, gw.KindRejected, gw.KindPolicyDenied, gw.KindProtocolViolation,
	gw.KindUnknownProviderAcceptance, gw.KindCancelled}

// TestPropertyRecordedReceiptsVerify: whatever happens upstream, a receipt
// written by the Recorder verifies with no drift, its attempts stay inside
// the alias and the tenant's data boundary, and it survives a JSON round trip.
func TestPropertyRecordedReceiptsVerify(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(t)
		alias := p.Alias("chat")
		tenantMax := gw.DataBoundary(rapid.IntRange(1, 3).Draw(t, "tenant_max"))
		h := header(int64(rapid.IntRange(0, 8000).Draw(t, "input_tokens")))
		h.Request.MaxDataBoundary = tenantMax.String()
		h.Request.IneligibleRoutes = alias.Ineligible(policy.Needs{}, tenantMax)
		h.Request.AcceptRestart = rapid.Bool().Draw(t, "accept_restart")
		h.Deadline = created.Add(time.Duration(rapid.IntRange(100, 20000).Draw(t, "deadline_ms")) * time.Millisecond)
		rc := NewRecorder(alias, h)
		d := rc.Start(retry.Admission{}, created)
		for d.Dispatches() {
			start := d.NotBefore.Add(time.Duration(rapid.IntRange(0, 30).Draw(t, "lag")) * time.Millisecond)
			k := kinds[rapid.IntRange(0, len(kinds)-1).Draw(t, "kind")]
			o := Observation{StartedAt: start, ObservedAt: start.Add(time.Duration(rapid.IntRange(0, 2000).Draw(t, "dur")) * time.Millisecond),
				Kind: k, HTTPStatus: 200, Breaker: BreakerState{State: "closed"}}
			if k == gw.KindOK || k == gw.KindStreamInterruptedAfterOutput {
				o.VisibleOutput, o.EmittedTokens = true, int64(rapid.IntRange(1, 300).Draw(t, "emitted"))
				o.Usage = gw.Usage{InputTokens: h.Request.EstimatedInputTokens, OutputTokens: o.EmittedTokens}
			}
			if rapid.Bool().Draw(t, "hint") {
				ra := time.Duration(rapid.IntRange(0, 3000).Draw(t, "ra")) * time.Millisecond
				o.RetryAfter = &ra
			}
			var err error
			if d, err = rc.Observe(o, retry.Admission{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := rc.Seal(); err != nil {
			t.Fatal(err)
		}
		for _, a := range rc.R.Attempts {
			route := alias.Route(a.Route)
			if route == nil || route.Boundary > tenantMax || route.Boundary > alias.MaxBoundary {
				t.Fatalf("attempt %d on %s crosses the boundary (tenant %s)", a.Ordinal, a.Route, tenantMax)
			}
		}
		data, err := rc.R.Indented()
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		if drifts := Verify(p, back); len(drifts) != 0 {
			t.Fatalf("a recorded receipt drifts: %v\n%s", drifts, data)
		}
	})
}
