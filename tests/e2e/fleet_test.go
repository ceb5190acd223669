package e2e

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/coord/redis/redistest"
	"github.com/oncegate/oncegate/internal/ledger/postgres/pgtest"
	"github.com/oncegate/oncegate/internal/mock"
)

// fleetConfig is the replicas' configuration: an OpenAI-protocol primary
// and an Anthropic-protocol fallback, three tenants (one unlimited, one
// rate-limited, one with a daily ceiling), a short lease.
const fleetConfig = `
admin_key_env: ONCEGATE_E2E_ADMIN
tenants:
  - {id: e2e, api_key_env: ONCEGATE_E2E_KEY}
  - {id: capped, api_key_env: ONCEGATE_E2E_CAPPED, budget: {requests_per_minute: 2}}
  - {id: thrifty, api_key_env: ONCEGATE_E2E_THRIFTY, budget: {cost_usd_per_day: 0.0005}}
providers:
  - {id: primary, type: openai, base_url: "PRIMARY/v1", timeouts: {connect: 1s, first_byte: 30s, idle: 30s}}
  - {id: fallback, type: anthropic, base_url: "FALLBACK", timeouts: {connect: 1s, first_byte: 30s, idle: 30s}}
routes:
  - {id: primary, provider: primary, model: primary-model, behavior_class: c, data_boundary: local, max_attempts: 3,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 1000}, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}}
  - {id: fallback, provider: fallback, model: fallback-model, behavior_class: c, data_boundary: local, max_attempts: 2,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 1000}, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}}
models:
  - {name: chat, routes: [primary], retry: {max_attempts: 3, base_delay: 10ms, max_delay: 50ms, deadline: 60s}}
  - {name: chat-fb, routes: [primary, fallback], retry: {max_attempts: 5, base_delay: 10ms, max_delay: 50ms, deadline: 60s}}
lease: LEASE
`

const (
	keyCapped  = "sk-og-e2e-capped"
	keyThrifty = "sk-og-e2e-thrifty"
	fleetLease = 3 * time.Second
)

// fleet is several `oncegate serve` processes sharing one PostgreSQL
// database (a schema of the test's own) and one Redis (a key prefix of
// its own), in front of two mock providers.
type fleet struct {
	t                 *testing.T
	primary, fallback *mock.Mock
	config            string
	store, coord      string
	pg                *proxy // between the replicas and PostgreSQL, when a test cuts it
	lease             string // the configuration's lease ("": fleetLease)
	gws               []*gateway
	// front, when set before the mocks start, stands in front of the
	// primary mock.
	front func(http.Handler) http.Handler
}

// newFleet starts n replicas; extra is appended to the configuration.
func newFleet(t *testing.T, n int, mcfg mock.Config, extra string) *fleet {
	return newFleetWith(t, n, mcfg, extra, func(*fleet) {})
}

// newFleetOn is newFleet with the coordination URL given.
func newFleetOn(t *testing.T, n int, mcfg mock.Config, extra, coordination string) *fleet {
	return newFleetWith(t, n, mcfg, extra, func(f *fleet) { f.coord = coordination })
}

// newFleetWith is newFleet with setup changing the fleet before its
// replicas start.
func newFleetWith(t *testing.T, n int, mcfg mock.Config, extra string, setup func(*fleet)) *fleet {
	readSources("../..")
	f := &fleet{t: t, store: pgtest.URL(t)}
	setup(f)
	if f.coord == "" {
		f.coord = redistest.URL(t)
	}
	f.primary, f.fallback = mock.New(mcfg), mock.New(mcfg)
	urls := map[string]string{}
	for name, m := range map[string]*mock.Mock{"PRIMARY": f.primary, "FALLBACK": f.fallback} {
		var h http.Handler = m
		if name == "PRIMARY" && f.front != nil {
			h = f.front(m)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		t.Cleanup(m.Close)
		urls[name] = srv.URL
	}
	lease := cmp.Or(f.lease, "{ttl: 3s, renew: 1s}")
	cfg := strings.NewReplacer("PRIMARY", urls["PRIMARY"], "FALLBACK", urls["FALLBACK"], "LEASE", lease).Replace(fleetConfig) + extra
	f.config = filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(f.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	for range n {
		f.gws = append(f.gws, f.start())
	}
	return f
}

// start runs one more replica and waits until it listens.
func (f *fleet) start() *gateway {
	f.t.Helper()
	return startServe(f.t, []string{"--config", f.config, "--store", f.store, "--coordination", f.coord},
		[]string{"ONCEGATE_E2E_KEY=" + apiKey, "ONCEGATE_E2E_CAPPED=" + keyCapped, "ONCEGATE_E2E_THRIFTY=" + keyThrifty, "ONCEGATE_E2E_ADMIN=" + adminKey})
}

// call is one HTTP exchange's result.
type call struct {
	status  int
	header  http.Header
	body    []byte
	err     error
	elapsed time.Duration
}

func (c call) String() string {
	return fmt.Sprintf("%d %s dedup=%s err=%v", c.status, bytes.TrimSpace(c.body), c.header.Get("X-Oncegate-Dedup"), c.err)
}

// send posts body to a replica: the OpenAI API unless anthropic.
func send(ctx context.Context, g *gateway, key, idemKey string, anthropic bool, body string) call {
	path := "/v1/chat/completions"
	if anthropic {
		path = "/v1/messages"
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", g.url+path, strings.NewReader(body))
	if anthropic {
		req.Header.Set("x-api-key", key)
		req.Header.Set("anthropic-version", "2023-06-01")
	} else {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	start := time.Now()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return call{err: err, elapsed: time.Since(start)}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return call{status: res.StatusCode, header: res.Header, body: b, err: err, elapsed: time.Since(start)}
}

func chatJSON(model, content string, stream bool, extra string) string {
	return fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":%q}]%s}`, model, stream, content, extra)
}

// metric reads one sample of a replica's /metrics (-1 if absent).
func (g *gateway) metric(t *testing.T, sample string) float64 {
	t.Helper()
	req, _ := http.NewRequest("GET", g.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, sample+" ") {
			var v float64
			_, _ = fmt.Sscan(strings.TrimPrefix(line, sample+" "), &v)
			return v
		}
	}
	return -1
}

// within polls cond until it holds or d passes.
func within(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// httpClient has no timeout of its own: the tests bound their waits.
var httpClient = &http.Client{}

func newRequest(url, body string) (*http.Request, error) {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	return req, nil
}
