package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const minimal = `
tenants: [{id: acme, api_key_env: KEY_ACME}]
providers: [{id: p, type: openai, base_url: "http://127.0.0.1:1/v1"}]
routes:
  - id: r
    provider: p
    model: m
    behavior_class: c
    data_boundary: local
    max_attempts: 2
models: [{name: chat, routes: [r]}]
`

func TestParseMinimalAppliesDefaults(t *testing.T) {
	cfg, err := Parse("min.yaml", []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Models[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"listen", cfg.Listen, "127.0.0.1:8080"},
		{"store", cfg.Store, "sqlite://oncegate.db"},
		{"retry.max_attempts", m.Retry.MaxAttempts, 3},
		{"retry.base_delay", m.Retry.BaseDelay.D(), 200 * time.Millisecond},
		{"retry.max_delay", m.Retry.MaxDelay.D(), 1500 * time.Millisecond},
		{"retry.jitter", m.Retry.Jitter, "full"},
		{"stream.after_output", m.Stream.AfterOutput, "resume"},
		{"stream.restart_max_tokens", m.Stream.RestartMaxTokens, 40},
		{"require.input", strings.Join(m.Require.Input, ","), "text"},
		{"route release defaults to model", cfg.Routes[0].Release, "m"},
		{"route continuation", cfg.Routes[0].Capabilities.Continuation, "none"},
		{"provider first_byte", cfg.Providers[0].Timeouts.FirstByte.D(), 30 * time.Second},
		{"idempotency.sdk_retry_window", cfg.Idempotency.SDKRetryWindow.D(), 10 * time.Minute},
		{"ledger.receipt_retention", cfg.Ledger.ReceiptRetention.D(), 90 * 24 * time.Hour},
		{"breaker.half_open_probes", cfg.Breaker.HalfOpenProbes, 3},
		{"tenant max boundary", cfg.Tenants[0].MaxDataBoundary, "external"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if !cfg.Has("routes[0].max_attempts") || cfg.Has("routes[0].price") {
		t.Error("presence tracking is wrong")
	}
	if p := cfg.Pos("routes[0].price.input_usd_per_mtok"); p.Line != 5 {
		t.Errorf("nearest position for an absent field: %v, want line 5 (the route)", p)
	}
}

func TestParseErrorsNamePositionAndPath(t *testing.T) {
	tests := []struct {
		name     string
		yaml     string
		wantPath string
		wantPos  string // "line:col"
		wantMsg  string
	}{
		{"unknown field with suggestion", minimal + "retry_budgett: {}\n", "retry_budgett", "12:1", `did you mean "retry_budget"`},
		{"unknown nested field", strings.Replace(minimal, "max_attempts: 2", "max_attempts: 2\n    colour: red", 1), "routes[0].colour", "11:5", `unknown field "colour"`},
		{"wrong type: string for int", strings.Replace(minimal, "max_attempts: 2", "max_attempts: two", 1), "routes[0].max_attempts", "10:19", "want an integer"},
		{"wrong type: int for string", strings.Replace(minimal, "model: m", "model: 4", 1), "routes[0].model", "7:12", "want a string"},
		{"wrong type: list for mapping", minimal + "breaker: [1]\n", "breaker", "12:10", "want a mapping"},
		{"malformed duration", minimal + "breaker: {open_for: 30}\n", "breaker.open_for", "12:21", "want a duration"},
		{"duration without unit", minimal + "breaker: {open_for: \"30\"}\n", "breaker.open_for", "12:21", "malformed duration"},
		{"negative duration", minimal + "breaker: {open_for: -1s}\n", "breaker.open_for", "12:21", "negative duration"},
		{"negative receipt retention", minimal + "ledger: {receipt_retention: -1h}\n", "ledger.receipt_retention", "12:29", "negative duration"},
		{"receipt retention in days", minimal + "ledger:\n  receipt_retention: 90d\n", "ledger.receipt_retention", "13:22", `malformed duration "90d"`},
		{"receipt retention without unit", minimal + "ledger: {receipt_retention: 90}\n", "ledger.receipt_retention", "12:29", "want a duration"},
		{"missing required field", strings.Replace(minimal, "    provider: p\n", "", 1), "routes[0].provider", "5:5", `missing required field "provider"`},
		{"missing required section", strings.Replace(minimal, "models: [{name: chat, routes: [r]}]\n", "", 1), "models", "2:1", `missing required field "models"`},
		{"duplicate key", minimal + "listen: a\nlisten: b\n", "listen", "13:1", "duplicate field"},
		{"float for bool", minimal + "limits: {max_body_bytes: 1.5}\n", "limits.max_body_bytes", "12:26", "want an integer"},
		{"infinite number", strings.Replace(minimal, "max_attempts: 2", "max_attempts: 2\n    price: {input_usd_per_mtok: .inf}", 1), "routes[0].price.input_usd_per_mtok", "11:33", "finite"},
		{"merge keys", minimal + "breaker: {<<: {a: 1}}\n", "breaker", "12:11", "merge keys"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tc.yaml))
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("want Errors, got %v", err)
			}
			for _, e := range errs {
				if e.Path == tc.wantPath && e.Pos.String() == tc.wantPos && strings.Contains(e.Msg, tc.wantMsg) {
					if !strings.HasPrefix(e.Error(), "f.yaml:"+tc.wantPos+": "+tc.wantPath+": ") {
						t.Fatalf("rendering %q lacks file:line:col: path", e.Error())
					}
					return
				}
			}
			t.Fatalf("no error at %s %s containing %q; got:\n%v", tc.wantPos, tc.wantPath, tc.wantMsg, err)
		})
	}
}

func TestParseReportsEveryProblemAtOnce(t *testing.T) {
	bad := strings.NewReplacer("max_attempts: 2", "max_attempts: x", "model: m", "model: [m]").Replace(minimal) + "extra: 1\n"
	_, err := Parse("f.yaml", []byte(bad))
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 3 {
		t.Fatalf("want 3 errors, got %v", err)
	}
}

func TestParseSyntaxAndShapeErrors(t *testing.T) {
	for name, in := range map[string]string{
		"empty":          "",
		"only a comment": "# nothing\n",
		"syntax":         "tenants: [\n",
		"two documents":  minimal + "---\nlisten: x\n",
		"scalar root":    "hello",
		"alias bomb":     "a: &a [1,1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\ntenants: [*e]\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(in))
			if err == nil || !strings.HasPrefix(err.Error(), "f.yaml") {
				t.Fatalf("want an error naming the file, got %v", err)
			}
		})
	}
}

func TestResolveSecrets(t *testing.T) {
	cfg, err := Parse("min.yaml", []byte(minimal+"secret_env: GW_SECRET\n"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	_, err = cfg.ResolveSecrets(lookup)
	if err == nil || !strings.Contains(err.Error(), "KEY_ACME is not set") || !strings.HasPrefix(err.Error(), "min.yaml:2:") {
		t.Fatalf("missing tenant key must be an error with its position, got %v", err)
	}
	env["KEY_ACME"] = "sk-acme"
	s, err := cfg.ResolveSecrets(lookup)
	if err != nil {
		t.Fatal(err)
	}
	if s.TenantKeys["sk-acme"] != "acme" {
		t.Fatalf("tenant keys: %v", s.TenantKeys)
	}
}

// FuzzParse: no input makes the decoder panic, and every rejection is an
// Errors naming the file.
func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte("tenants: [{id: 1}]\nroutes: {a: b}\n"))
	f.Add([]byte("breaker: {open_for: 1h, window: x}\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data)
		if err == nil {
			if cfg == nil {
				t.Fatal("nil config without error")
			}
			return
		}
		var errs Errors
		if !errors.As(err, &errs) || len(errs) == 0 {
			t.Fatalf("error is not Errors: %T %v", err, err)
		}
		for _, e := range errs {
			if e.File != "fuzz.yaml" || e.Msg == "" {
				t.Fatalf("error without file or message: %#v", e)
			}
		}
	})
}

// A relative SQLite path is the configuration file's neighbour, wherever
// the command runs from.
func TestRelativeStoreIsBesideTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(path, []byte("store: sqlite://data/ledger.db\n"+minimal), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "sqlite://" + filepath.Join(dir, "data/ledger.db"); c.Store != want {
		t.Fatalf("store %s, want %s", c.Store, want)
	}
	for in, want := range map[string]string{"sqlite:///abs/x.db": "sqlite:///abs/x.db", "postgres://h/db": "postgres://h/db", "memory://": "memory://"} {
		if got := resolveStore(in, dir); got != want {
			t.Fatalf("%s → %s", in, got)
		}
	}
}

// ledger.receipt_retention reads a duration; 0 (keep forever) is a value
// of its own, not the default.
func TestReceiptRetentionZeroKeepsForever(t *testing.T) {
	cfg, err := Parse("min.yaml", []byte(minimal+"ledger: {receipt_retention: 0s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Ledger.ReceiptRetention.D(); got != 0 {
		t.Fatalf("receipt_retention = %v, want 0", got)
	}
	if !cfg.Has("ledger.receipt_retention") {
		t.Fatal("an explicit 0 is not recorded as set")
	}
}
