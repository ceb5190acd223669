package replica

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/coord/redis/redistest"
	"github.com/oncegate/oncegate/internal/gateway"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/postgres"
	"github.com/oncegate/oncegate/internal/ledger/postgres/pgtest"
	"github.com/oncegate/oncegate/internal/load"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/policy"
)

// Redis's day, seeded from PostgreSQL after Redis restarted empty,
// counts what requests still in flight reserved in the Redis that was
// lost, besides the day's charges: otherwise those requests' spend would
// come on top of a budget handed out again. (The chaos soak with three
// replicas found a tenant 20 µUSD over its ceiling without it.)
func TestSeedSpendCountsRequestsInFlight(t *testing.T) {
	ctx := context.Background()
	st, err := postgres.Open(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	for _, id := range []string{"flying", "done"} {
		rec := &ledger.Record{Identity: "k:" + id, RequestID: id, Tenant: "acme", State: ledger.InProgress, Generation: 1,
			Owner: "o", LeaseUntil: now.Add(time.Minute), CreatedAt: now}
		evs := []ledger.Event{{RequestID: id, Seq: 1, Generation: 1, Type: ledger.EvCreated, At: now},
			{RequestID: id, Seq: 2, Generation: 1, Type: ledger.EvReserved, At: now, Data: []byte(`{"reserve_usd":0.000080}`)}}
		if _, _, err := st.Claim(ctx, rec, evs); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Finish(ctx, &ledger.Finish{RequestID: "done", Generation: 1, State: ledger.Succeeded, At: now, Tenant: "acme", Charge: 63_000,
		Events: []ledger.Event{{RequestID: "done", Seq: 3, Generation: 1, Type: ledger.EvTerminal, At: now}}, Receipt: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	spend, err := seedSpend(st)(ctx, ledger.Day(now))
	if err != nil {
		t.Fatal(err)
	}
	if spend["acme"] != 63_000+80_000 {
		t.Fatalf("seeded %d nano-USD, want the charge 63000 and the reservation in flight 80000", spend["acme"])
	}
}

// Two replicas sharing PostgreSQL and Redis see each other's load: a
// request one of them holds in flight on a route of a least_busy tier
// sends the other's next request to the tier's other route, and a
// route's provider saying it has no requests left, to one of them, keeps
// the other's quota tier off it (docs/routing.md).
func TestReplicasChooseByEachOthersLoad(t *testing.T) {
	redisURL, pgURL := redistest.URL(t), pgtest.URL(t)
	// Each provider holds the requests it is told to until released, and
	// reports the rate-limit headroom it is told to.
	type upstream struct {
		hold      atomic.Bool
		release   chan struct{}
		held      atomic.Int64
		remaining atomic.Int64
		m         *mock.Mock
		url       string
	}
	mk := func() *upstream {
		u := &upstream{release: make(chan struct{}), m: mock.New(mock.Config{Tokens: 2})}
		u.remaining.Store(100)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u.hold.Load() {
				u.held.Add(1)
				<-u.release
			}
			w.Header().Set("x-ratelimit-limit-requests", "100")
			w.Header().Set("x-ratelimit-remaining-requests", strconv.FormatInt(u.remaining.Load(), 10))
			w.Header().Set("x-ratelimit-reset-requests", "1m")
			u.m.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		t.Cleanup(u.m.Close)
		u.url = srv.URL
		return u
	}
	east, west := mk(), mk()
	yaml := `tenants: [{id: acme, api_key_env: K}]
providers:
  - {id: pe, type: openai, base_url: "EAST/v1", timeouts: {first_byte: 20s}}
  - {id: pw, type: openai, base_url: "WEST/v1", timeouts: {first_byte: 20s}}
routes:
  - {id: east, provider: pe, model: m-east, behavior_class: c, data_boundary: external, max_attempts: 1, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 1}, capabilities: {input: [text]}}
  - {id: west, provider: pw, model: m-west, behavior_class: c, data_boundary: external, max_attempts: 1, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 1}, capabilities: {input: [text]}}
models:
  - {name: busy, routes: [[east, west]], strategy: least_busy, retry: {max_attempts: 1, deadline: 30s}}
  - {name: quota, routes: [[east, west]], strategy: quota, retry: {max_attempts: 1, deadline: 30s}}
`
	yaml = strings.NewReplacer("EAST", east.url, "WEST", west.url).Replace(yaml)
	a, b, _ := startPair(t, redisURL, pgURL, "replicas.yaml", yaml)
	post := func(r replica, model string, i int) (*http.Response, error) {
		req, _ := http.NewRequest("POST", r.url+"/v1/chat/completions",
			strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"request `+strconv.Itoa(i)+` of `+t.Name()+`"}]}`))
		req.Header.Set("Authorization", "Bearer sk-acme")
		req.Header.Set("Content-Type", "application/json")
		return http.DefaultClient.Do(req)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s never happened", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// least_busy: a's request is held wherever it went; b's goes to the
	// other route.
	east.hold.Store(true)
	west.hold.Store(true)
	done := make(chan error, 1)
	go func() {
		res, err := post(a, "busy", 1)
		if err == nil {
			res.Body.Close()
		}
		done <- err
	}()
	waitFor("a's request upstream", func() bool { return east.held.Load()+west.held.Load() == 1 })
	busy, idle := east, west
	if west.held.Load() == 1 {
		busy, idle = west, east
	}
	busyRoute := map[*upstream]string{east: "east", west: "west"}[busy]
	waitFor("a's attempt in b's figures", func() bool { return b.load.Figures(busyRoute).InFlight == 1 })
	east.hold.Store(false)
	west.hold.Store(false)
	before := idle.m.Requests()
	res, err := post(b, "busy", 2)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("b's request: %v %v", res, err)
	}
	res.Body.Close()
	if idle.m.Requests() != before+1 || busy.m.Requests() != 0 {
		t.Fatalf("b sent its request to the route a keeps busy (%s)", busyRoute)
	}
	close(busy.release)
	close(idle.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// quota: east tells a it has nothing left; b then sends every request
	// west.
	east.remaining.Store(0)
	for i := 0; a.load.Figures("east").Headroom != 0; i++ {
		if i == 100 {
			t.Fatal("a sent 100 requests of a quota tier whose routes tie, none east")
		}
		res, err := post(a, "quota", 100+i) // until one of a's lands east
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	waitFor("east's headroom in b's figures", func() bool { return b.load.Figures("east").Headroom == 0 })
	before = east.m.Requests()
	for i := range 10 {
		res, err := post(b, "quota", 200+i)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("b's request: %v %v", res, err)
		}
		res.Body.Close()
	}
	if east.m.Requests() != before {
		t.Fatalf("b sent %d requests to a route with no requests left", east.m.Requests()-before)
	}
}

// replica is one gateway of a pair started by startPair.
type replica struct {
	url  string
	load *load.Table
}

// startPair starts two gateways serving the configuration yaml (file
// name for its errors), sharing the PostgreSQL store at pgURL and the
// coordination at redisURL, and the policy they serve; they stop with
// the test.
func startPair(t *testing.T, redisURL, pgURL, name, yaml string) (a, b replica, pol *policy.Policy) {
	t.Helper()
	ctx := context.Background()
	pol, err := policy.Parse(name, []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := pol.Config.ResolveSecrets(func(name string) (string, bool) {
		if name == "K" {
			return "sk-acme", true
		}
		return "sk-" + strings.ToLower(name), true // another tenant's key
	})
	if err != nil {
		t.Fatal(err)
	}
	start := func(owner string) replica {
		st, err := postgres.Open(ctx, pgURL)
		if err != nil {
			t.Fatal(err)
		}
		opts := gateway.Options{Owner: owner, Ledger: st}
		co, err := Share(ctx, pol, redisURL, st, nil, &opts)
		if err != nil {
			t.Fatal(err)
		}
		g, err := gateway.New(pol, secrets, opts)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = g.Serve(sctx, ln); close(done) }()
		t.Cleanup(func() { cancel(); <-done; g.Close(); _ = co.Close(); st.Close() })
		return replica{url: "http://" + ln.Addr().String(), load: opts.Load}
	}
	return start("replica-a-" + t.Name()), start("replica-b-" + t.Name()), pol
}
