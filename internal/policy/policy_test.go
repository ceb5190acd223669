package policy_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/retry"
)

func mustCompile(t *testing.T, file, yaml string) *policy.Policy {
	t.Helper()
	cfg, err := config.Parse(file, []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExampleCompiles(t *testing.T) {
	p, err := policy.Load("../../examples/oncegate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	chat, private := p.Alias("chat"), p.Alias("chat-private")
	if chat == nil || private == nil || len(chat.Routes) != 3 || chat.Routes[0].ID != "private-primary" {
		t.Fatalf("aliases: %+v", p.Aliases)
	}
	for _, r := range private.Routes {
		if r.Boundary > gw.BoundaryPrivate {
			t.Fatalf("chat-private reaches %s via %s", r.Boundary, r.ID)
		}
	}
	if len(chat.Digest) != 64 || chat.Digest == private.Digest || chat.Engine.Digest != chat.Digest {
		t.Fatalf("digests: %q %q", chat.Digest, private.Digest)
	}
	var out strings.Builder
	if err := policy.WriteTable(&out, p); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PRIORITY", "private-primary", "gpt-4o-2024-08-06", "continue_final_message", "2.5/10", chat.Digest, p.Digest} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q", want)
		}
	}
}

func TestDigestIgnoresFormattingButNotMeaning(t *testing.T) {
	src, err := os.ReadFile("../../examples/oncegate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	base := mustCompile(t, "a.yaml", string(src))
	// Comments, blank lines and flow vs block style do not change the policy.
	reformatted := strings.ReplaceAll(string(src), "# ", "#  ")
	reformatted = strings.Replace(reformatted, "budget: {requests_per_minute: 600, cost_usd_per_day: 50}",
		"budget:\n      cost_usd_per_day: 50\n      requests_per_minute: 600", 1)
	if got := mustCompile(t, "b.yaml", reformatted); got.Digest != base.Digest || got.Alias("chat").Digest != base.Alias("chat").Digest {
		t.Fatal("reformatting changed the digest")
	}
	// A price change is a policy change.
	repriced := strings.Replace(string(src), "input_usd_per_mtok: 2.5", "input_usd_per_mtok: 2.6", 1)
	got := mustCompile(t, "c.yaml", repriced)
	if got.Alias("chat").Digest == base.Alias("chat").Digest {
		t.Fatal("a price change did not change the alias digest")
	}
	if got.Alias("chat-private").Digest != base.Alias("chat-private").Digest {
		t.Fatal("an unrelated route changed chat-private's digest")
	}
}

func TestInvalidExampleNamesEveryViolation(t *testing.T) {
	_, err := policy.Load("../../examples/invalid.yaml")
	var errs config.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("want config.Errors, got %v", err)
	}
	want := []string{"max_attempts: must be at least 1", "duplicate route id", `unknown field "max_atempts"`,
		"capability gap", "behaviour-class mismatch", "data boundary", "malformed duration"}
	for _, w := range want {
		found := false
		for _, e := range errs {
			if strings.Contains(e.Error(), w) {
				found = true
				if e.Pos.Line == 0 {
					t.Errorf("%q has no file position", e.Error())
				}
			}
		}
		if !found {
			t.Errorf("no violation mentions %q", w)
		}
	}
	if len(errs) < 6 {
		t.Fatalf("want at least 6 violations, got %d", len(errs))
	}
}

const base = `
tenants: [{id: acme, api_key_env: K}]
providers:
  - {id: p, type: openai, base_url: "http://127.0.0.1:1/v1"}
routes:
  - {id: a, provider: p, model: m, behavior_class: c, data_boundary: private, max_attempts: 2, capabilities: {input: [text, image], tools: true, streaming: true, max_context_tokens: 8000}}
  - {id: b, provider: p, model: m, behavior_class: c, data_boundary: external, max_attempts: 1, capabilities: {input: [text], streaming: true, max_context_tokens: 32000}}
models:
  - name: chat
    routes: [a, b]
`

// A default output limit makes a fallback the cost cap would rule out
// reachable again, and accept_unreachable_routes acknowledges it.
func TestDefaultOutputTokensKeepAFallbackReachable(t *testing.T) {
	capped := base + `    retry: {max_cost_usd: 0.5}
`
	capped = strings.Replace(capped, "max_context_tokens: 32000}}", "max_context_tokens: 32000, max_output_tokens: 64000}, price: {input_usd_per_mtok: 3, output_usd_per_mtok: 15}}", 1)
	_, err := policy.Parse("x.yaml", []byte(capped))
	var errs config.Errors
	if !errors.As(err, &errs) || len(errs) != 1 || errs[0].Pos.Line == 0 ||
		!strings.Contains(errs[0].Error(), `route "b" can never be tried for a request without max_tokens: one attempt at 64000 output tokens costs $0.96`) {
		t.Fatalf("an unreachable fallback, named with its position: %v", err)
	}
	for _, fix := range []string{"    default_output_tokens: 4096\n", "    accept_unreachable_routes: true\n"} {
		p, err := policy.Parse("x.yaml", []byte(capped+fix))
		if err != nil {
			t.Fatalf("%q: %v", fix, err)
		}
		if fix == "    default_output_tokens: 4096\n" {
			e := p.Alias("chat").Engine
			if got := retry.OutputLimit(e, e.Route("b"), 0); got != 4096 {
				t.Fatalf("the output limit of a request without max_tokens: %d, want 4096", got)
			}
			if got := retry.OutputLimit(e, e.Route("b"), 100); got != 100 {
				t.Fatalf("a client's own max_tokens: %d, want 100", got)
			}
		}
	}
}

func TestValidationRules(t *testing.T) {
	tests := []struct {
		name, replace, with, want string
	}{
		{"unknown route reference", "routes: [a, b]", "routes: [a, zz]", `no route with id "zz"`},
		{"route listed twice", "routes: [a, b]", "routes: [a, a]", "listed twice"},
		{"unknown provider", "{id: b, provider: p,", "{id: b, provider: q,", `no provider with id "q"`},
		{"bad boundary", "data_boundary: external", "data_boundary: public", "unknown data boundary"},
		{"bad provider type", "type: openai", "type: cohere", `unknown provider type "cohere"`},
		{"key another type owns", "type: openai,", "type: openai, region: us-east-1,", `providers[0].region: provider type openai has no key "region"`},
		{"header the gateway sets", "type: openai,", "type: openai, headers: {content-type: text/plain},", `providers[0].headers.content-type: the gateway sets Content-Type itself`},
		{"required key missing", "type: openai,", "type: azure-openai,", `providers[0]: provider type azure-openai needs api_key_env or api_key_file`},
		{"bad base url", `"http://127.0.0.1:1/v1"`, `"ftp://x"`, "scheme must be http or https"},
		{"credentials in url", `"http://127.0.0.1:1/v1"`, `"http://u:p@x/v1"`, "credentials in the URL"},
		{"bad modality", "input: [text], streaming", "input: [smell], streaming", `unknown value "smell"`},
		{"bad continuation", "max_context_tokens: 8000}", "max_context_tokens: 8000, continuation: magic}", `unknown value "magic"`},
		{"boundary beyond alias", "routes: [a, b]", "routes: [a, b]\n    require: {max_data_boundary: private}", "data boundary"},
		{"tools required", "routes: [a, b]", "routes: [a, b]\n    require: {tools: true}", `"b" lacks tools`},
		{"idempotency required", "routes: [a, b]", "routes: [a, b]\n    require: {idempotency: true}", "does not support idempotency"},
		{"behaviour class differs", "behavior_class: c, data_boundary: external", "behavior_class: d, data_boundary: external", "behaviour-class mismatch"},
		{"retry max_attempts zero", "routes: [a, b]", "routes: [a, b]\n    retry: {max_attempts: 0}", "retry.max_attempts: must be at least 1"},
		{"max_delay below base", "routes: [a, b]", "routes: [a, b]\n    retry: {base_delay: 2s, max_delay: 1s}", "less than base_delay"},
		{"bad jitter", "routes: [a, b]", "routes: [a, b]\n    retry: {jitter: some}", `unknown value "some"`},
		{"bad after_output", "routes: [a, b]", "routes: [a, b]\n    stream: {after_output: pray}", `unknown value "pray"`},
		{"hedge with one route", "routes: [a, b]", "routes: [a]\n    hedge: {after: 1s}", "hedging needs a second route"},
		{"breaker ratio", "models:", "breaker: {failure_ratio: 1.5}\nmodels:", "must be in (0, 1]"},
		{"store scheme", "models:", "store: mysql://x\nmodels:", "want sqlite://PATH, postgres://… or memory://"},
		{"store sqlite without a file", "models:", "store: sqlite://\nmodels:", "names no file"},
		{"store postgres unparseable", "models:", "store: \"postgres://u@h:99999/db\"\nmodels:", "invalid port"},
		{"coordination scheme", "models:", "coordination: etcd://x\nmodels:", "want local or redis://"},
		{"coordination redis unparseable", "models:", "store: postgres://h/db\ncoordination: redis://h:6379/notadb\nmodels:", "invalid database number"},
		{"coordination cluster host without a port", "models:", "store: postgres://h/db\ncoordination: \"redis+cluster://n1:7000,n2\"\nmodels:", `coordination: coordination URL: host 2 of 2 is "n2": want host:port`},
		{"coordination sentinel without its master", "models:", "store: postgres://h/db\ncoordination: \"redis+sentinel://s1:26379/0\"\nmodels:", "needs master_name"},
		{"coordination cluster needs a shared store", "models:", "store: sqlite://x.db\ncoordination: \"redis+cluster://n1:7000,n2:7001\"\nmodels:", "can be opened by one process only"},
		{"coordination redis needs a shared store", "models:", "store: sqlite://x.db\ncoordination: \"redis://:hunter2@h:6379/0\"\nmodels:", "can be opened by one process only"},
		{"lease renew past half the ttl", "models:", "lease: {ttl: 10s, renew: 6s}\nmodels:", "at most half of lease.ttl"},
		{"no time for a request body", "models:", "limits: {body_read_timeout: 0s}\nmodels:", "limits.body_read_timeout: must be greater than 0"},
		{"memory limit too small", "models:", "limits: {memory_bytes: 1000}\nmodels:", "at least 67108864"},
		{"collector headroom too small", "models:", "limits: {gc_headroom_bytes: 1000}\nmodels:", "limits.gc_headroom_bytes"},
		{"collector headroom negative", "models:", "limits: {gc_headroom_bytes: -1}\nmodels:", "limits.gc_headroom_bytes"},
		{"ledger sync", "models:", "ledger: {sync: lazy}\nmodels:", `unknown value "lazy"`},
		{"ledger sync on memory", "models:", "store: memory://\nledger: {sync: normal}\nmodels:", "keeps nothing on disk"},
		{"on_expired", "models:", "idempotency: {on_expired: maybe}\nmodels:", `unknown value "maybe"`},
		{"negative cache price", "max_attempts: 1,", "max_attempts: 1, price: {input_usd_per_mtok: 1, cached_input_usd_per_mtok: -0.1},", "cached_input_usd_per_mtok: must not be negative"},
		{"negative cache write price", "max_attempts: 1,", "max_attempts: 1, price: {cache_write_usd_per_mtok: -1},", "cache_write_usd_per_mtok: must not be negative"},
		{"duplicate alias", "models:\n  - name: chat\n    routes: [a, b]", "models:\n  - name: chat\n    routes: [a, b]\n  - name: chat\n    routes: [a]", "duplicate model alias"},
		{"negative default output tokens", "routes: [a, b]", "routes: [a, b]\n    default_output_tokens: -1", "default_output_tokens: must not be negative"},
		{"negative monthly budget", "tenants: [{id: acme, api_key_env: K}]", "tenants: [{id: acme, api_key_env: K, budget: {cost_usd_per_month: -1}}]", "tenants[0].budget.cost_usd_per_month: must be a cost in USD, not negative"},
		{"lifetime budget past int64", "tenants: [{id: acme, api_key_env: K}]", "tenants: [{id: acme, api_key_env: K, budget: {cost_usd_total: 1e12}}]", "tenants[0].budget.cost_usd_total: must be at most 1e+09 USD"},
		{"budget webhook scheme", "models:", "alerts: {budget_webhook: {url: \"ftp://x/hook\", secret_env: S}}\nmodels:", "alerts.budget_webhook.url: scheme must be http or https"},
		{"budget webhook without a secret", "models:", "alerts: {budget_webhook: {url: \"https://x/hook\"}}\nmodels:", "alerts.budget_webhook.secret_env: required with url"},
		{"budget webhook secret without a url", "models:", "alerts: {budget_webhook: {secret_env: S}}\nmodels:", "alerts.budget_webhook.secret_env: names a secret but"},
		{"may_drop a field that cannot be dropped", "routes: [a, b]", "routes: [a, b]\n    may_drop: [seed, temperature]", `may_drop[1]: "temperature" is not a field a route may drop`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(base, tc.replace, tc.with, 1)
			if src == base {
				t.Fatalf("replacement %q not found", tc.replace)
			}
			cfg, err := config.Parse("v.yaml", []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			_, err = policy.Compile(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want a violation containing %q, got:\n%v", tc.want, err)
			}
			if !strings.Contains(err.Error(), "v.yaml:") {
				t.Fatalf("violation lacks a position: %v", err)
			}
		})
	}
	mustCompile(t, "ok.yaml", base)
}

// A route's cache prices default to its input price; set, they price the
// cache apart and are part of the policy (its digest), unset they leave
// the digest of a policy written before they existed alone.
func TestCachePricesDefaultToTheInputPrice(t *testing.T) {
	priced := strings.Replace(base, "max_attempts: 1,", "max_attempts: 1, price: {input_usd_per_mtok: 3, output_usd_per_mtok: 15},", 1)
	plain := mustCompile(t, "plain.yaml", priced)
	p := plain.Alias("chat").Routes[1].Price
	if p.InputPerToken != 3000 || p.CachedInput() != 3000 || p.CacheWrite() != 3000 {
		t.Fatalf("unset cache prices: %+v (cached %d, write %d)", p, p.CachedInput(), p.CacheWrite())
	}
	cached := mustCompile(t, "cached.yaml", strings.Replace(priced, "output_usd_per_mtok: 15}",
		"output_usd_per_mtok: 15, cached_input_usd_per_mtok: 0.3, cache_write_usd_per_mtok: 3.75}", 1))
	if p := cached.Alias("chat").Routes[1].Price; p.CachedInput() != 300 || p.CacheWrite() != 3750 || p.InputPerToken != 3000 {
		t.Fatalf("set cache prices: cached %d, write %d", p.CachedInput(), p.CacheWrite())
	}
	if cached.Alias("chat").Digest == plain.Alias("chat").Digest {
		t.Fatal("cache prices did not change the alias digest")
	}
	same := mustCompile(t, "same.yaml", strings.Replace(priced, "output_usd_per_mtok: 15}",
		"output_usd_per_mtok: 15, cached_input_usd_per_mtok: 3, cache_write_usd_per_mtok: 3}", 1))
	if same.Alias("chat").Digest != plain.Alias("chat").Digest {
		t.Fatal("cache prices equal to the input price changed the digest")
	}
}

func TestIneligible(t *testing.T) {
	a := mustCompile(t, "ok.yaml", base).Alias("chat")
	tests := []struct {
		name  string
		needs policy.Needs
		limit gw.DataBoundary
		want  string // "route=reason-fragment", sorted, comma-joined
	}{
		{"plain text", policy.Needs{}, gw.BoundaryExternal, ""},
		{"image skips text-only", policy.Needs{Images: true}, gw.BoundaryExternal, "b=no image input"},
		{"tools", policy.Needs{Tools: true}, gw.BoundaryExternal, "b=no tool support"},
		{"tenant boundary", policy.Needs{}, gw.BoundaryPrivate, "b=data boundary external exceeds"},
		{"context too large for the small route", policy.Needs{ContextTokens: 10000}, gw.BoundaryExternal, "a=context 10000"},
		{"context too large for all: largest still tried", policy.Needs{ContextTokens: 99999}, gw.BoundaryExternal, "a=context 99999"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := a.Ineligible(tc.needs, tc.limit)
			var parts []string
			for _, r := range a.Routes {
				if why, ok := got[r.ID]; ok {
					parts = append(parts, r.ID+"="+why)
				}
			}
			joined := strings.Join(parts, ",")
			if (tc.want == "") != (joined == "") || !strings.HasPrefix(joined, tc.want) {
				t.Fatalf("got %q, want prefix %q", joined, tc.want)
			}
		})
	}
}

// The model catalogue prices a route that states no price and fills the
// capabilities it leaves out; what a route states wins; check warns, with
// the position, of a route that bills $0 for want of a price and of a
// stated price more than twice or under half the catalogue's.
func TestTheCatalogueFillsWhatARouteLeavesOut(t *testing.T) {
	yaml := strings.Replace(base, "model: m, behavior_class: c, data_boundary: private", "model: gpt-4o-mini, behavior_class: c, data_boundary: private", 1)
	yaml = strings.Replace(yaml, "max_context_tokens: 8000}}", "max_output_tokens: 100}}", 1)
	p, err := policy.Parse("x.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	a := p.Route("a")
	if a.PriceUSDPerMTok != [2]float64{0.15, 0.6} || a.Caps.MaxContextTokens != 128000 || a.Caps.MaxOutputTokens != 100 {
		t.Fatalf("route a: price %v, capabilities %+v", a.PriceUSDPerMTok, a.Caps)
	}
	if got := a.Price.Cost(gw.Usage{InputTokens: 1_000_000, CachedTokens: 1_000_000}); got != gw.NanoFromUSD(0.075) {
		t.Fatalf("a million cached tokens cost %v, want the catalogue's $0.075", got.USD())
	}
	if len(p.Warnings) != 1 || p.Warnings[0].Pos.Line != 7 || !strings.Contains(p.Warnings[0].Error(), `routes[1].model: model "m" is not in the model catalogue and the route states no price: it bills $0`) {
		t.Fatalf("warnings %v", p.Warnings)
	}
	over := strings.Replace(yaml, "max_output_tokens: 100}}", "max_output_tokens: 100}, price: {input_usd_per_mtok: 1.5, output_usd_per_mtok: 0.6}}", 1)
	over = strings.Replace(over, "data_boundary: external, max_attempts: 1,", "data_boundary: external, max_attempts: 1, price: {input_usd_per_mtok: 0, output_usd_per_mtok: 0},", 1)
	p, err = policy.Parse("x.yaml", []byte(over))
	if err != nil {
		t.Fatal(err)
	}
	if a := p.Route("a"); a.PriceUSDPerMTok != [2]float64{1.5, 0.6} {
		t.Fatalf("a stated price lost to the catalogue: %v", a.PriceUSDPerMTok)
	}
	if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0].Error(), "routes[0].price.input_usd_per_mtok: 1.5 differs from the catalogue's 0.15 for gpt-4o-mini by more than a factor of two") {
		t.Fatalf("warnings %v", p.Warnings)
	}
}

// Every setting that changes what a request may do or cost changes a
// digest a receipt records: the policy's for a tenant's limits, the
// alias's for how its requests are identified and retried.
func TestEveryBehaviourSettingChangesADigest(t *testing.T) {
	compiled := mustCompile(t, "base.yaml", base)
	for _, c := range []struct{ name, from, to string }{
		{"a tenant's month", "{id: acme, api_key_env: K}", "{id: acme, api_key_env: K, budget: {cost_usd_per_month: 5}}"},
		{"a tenant's lifetime", "{id: acme, api_key_env: K}", "{id: acme, api_key_env: K, budget: {cost_usd_total: 5}}"},
		{"a tenant's day", "{id: acme, api_key_env: K}", "{id: acme, api_key_env: K, budget: {cost_usd_per_day: 5}}"},
		{"an alias's keyless_join", "    routes: [a, b]\n", "    routes: [a, b]\n    keyless_join: false\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(base, c.from) {
				t.Fatalf("the base has no %q", c.from)
			}
			p := mustCompile(t, "changed.yaml", strings.Replace(base, c.from, c.to, 1))
			if p.Digest == compiled.Digest && p.Alias("chat").Digest == compiled.Alias("chat").Digest {
				t.Fatalf("%s changed neither the policy's digest nor the alias's", c.name)
			}
		})
	}
}
