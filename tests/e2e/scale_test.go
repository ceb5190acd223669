package e2e

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/coord/redis/redistest"
	"github.com/oncegate/oncegate/internal/ledger/postgres/pgtest"
	"github.com/oncegate/oncegate/internal/mock"
)

// Two replicas on one PostgreSQL and a Redis Cluster — or a server Redis
// Sentinel watches — are one gateway: every keyed request sent four times
// at once, twice to each replica, makes one upstream generation and four
// identical answers; streams are joined across the replicas, byte for
// byte; a tenant's rate holds across them.
func TestReplicasOnRedisClusterAndSentinel(t *testing.T) {
	for _, d := range []redistest.Deployment{{Name: "cluster", URL: redistest.ClusterURL}, {Name: "sentinel", URL: redistest.SentinelURL}} {
		t.Run(d.Name, func(t *testing.T) { oneGatewayOn(t, d.URL(t)) })
	}
}

func oneGatewayOn(t *testing.T, coordination string) {
	f := newFleetOn(t, 2, mock.Config{TTFT: 1500 * time.Millisecond, TokenInterval: 2 * time.Millisecond, Tokens: 12}, "", coordination)
	const n, copies = 40, 4
	type logical struct {
		key, body string
		stream    bool
		got       [copies]call
	}
	reqs := make([]*logical, n)
	var wg sync.WaitGroup
	for i := range reqs {
		l := &logical{key: fmt.Sprintf("scale-%d", i), stream: i%2 == 1}
		l.body = chatJSON("chat", fmt.Sprintf("Question %d for the cluster", i), l.stream, `,"max_tokens":100`)
		reqs[i] = l
		for c := range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l.got[c] = send(context.Background(), f.gws[c%2], apiKey, l.key, false, l.body)
			}()
		}
	}
	wg.Wait()
	crossJoins := 0
	for i, l := range reqs {
		first := l.got[0]
		id := first.header.Get("X-Oncegate-Request-Id")
		owner := -1
		for c, got := range l.got {
			if got.err != nil || got.status != 200 || !bytes.Equal(got.body, first.body) || got.header.Get("X-Oncegate-Request-Id") != id {
				t.Fatalf("request %d, copy %d: %v (copy 0: %v)", i, c, got, first)
			}
			switch got.header.Get("X-Oncegate-Dedup") {
			case "miss":
				if owner >= 0 {
					t.Fatalf("request %d: two copies owned it", i)
				}
				owner = c % 2
			case "joined", "replayed":
			default:
				t.Fatalf("request %d, copy %d: X-Oncegate-Dedup %q", i, c, got.header.Get("X-Oncegate-Dedup"))
			}
		}
		if owner < 0 {
			t.Fatalf("request %d: no copy owned it", i)
		}
		for c, got := range l.got {
			if l.stream && c%2 != owner && got.header.Get("X-Oncegate-Dedup") == "joined" {
				crossJoins++
			}
		}
		if l.stream && !bytes.Contains(first.body, []byte("data:")) {
			t.Fatalf("request %d: not a stream: %s", i, first.body)
		}
	}
	st := f.primary.Stats()
	if st.Requests != n || st.Generations != n || len(st.ByRequestID) != n {
		t.Fatalf("%d logical requests: the provider saw %d requests, %d generations, %d request ids", n, st.Requests, st.Generations, len(st.ByRequestID))
	}
	if crossJoins == 0 {
		t.Fatal("no stream was joined from the other replica")
	}
	t.Logf("%d stream copies joined across the replicas", crossJoins)
	// The capped tenant's two requests a minute, across both replicas.
	var admitted []string
	for i := range 3 {
		key := fmt.Sprintf("capped-%d", i)
		c := send(context.Background(), f.gws[i%2], keyCapped, key, false, chatJSON("chat", key, false, ""))
		switch {
		case c.status == 200:
			admitted = append(admitted, key)
		case c.status == 429 && bytes.Contains(c.body, []byte("tenant_rate_limited")):
		default:
			t.Fatalf("%s: %v", key, c)
		}
	}
	if len(admitted) != 2 {
		t.Fatalf("%d of 3 admitted in a minute of 2", len(admitted))
	}
}

// Two replicas whose store URL lists a PostgreSQL primary and its standby
// (target_session_attrs=read-write) survive a primary switch: while no
// server takes writes a new request is refused 503 store_unavailable,
// nothing sent upstream; once the standby is promoted, each replica
// serves again from its first request on, and every request answered
// before the switch is replayed from the promoted standby, byte for
// byte, on either replica.
func TestReplicasSurviveAPostgreSQLPrimarySwitch(t *testing.T) {
	pair := pgtest.NewPair(t)
	f := newFleetWith(t, 2, mock.Config{Tokens: 4}, "", func(f *fleet) { f.store = pair.URL() })
	ctx := context.Background()
	const n = 12
	body := func(key string) string { return chatJSON("chat", "before the switch: "+key, len(key)%2 == 1, "") }
	before := map[string]call{}
	for i := range n {
		key := fmt.Sprintf("switch-%d", i)
		c := send(ctx, f.gws[i%2], apiKey, key, false, body(key))
		if c.status != 200 {
			t.Fatalf("%s: %v", key, c)
		}
		before[key] = c
	}
	pair.StopPrimary()
	for r, g := range f.gws {
		c := send(ctx, g, apiKey, fmt.Sprintf("during-%d", r), false, chatJSON("chat", "while no server takes writes", false, ""))
		if c.status != 503 || errorCode(c) != "store_unavailable" || c.header.Get("x-should-retry") != "true" {
			t.Fatalf("replica %d while no server takes writes: %v", r, c)
		}
	}
	if got := f.primary.Stats().Requests; got != n {
		t.Fatalf("the provider saw %d requests, want %d: a refused request was sent", got, n)
	}
	pair.Promote()
	for r, g := range f.gws {
		if c := send(ctx, g, apiKey, fmt.Sprintf("after-%d", r), false, chatJSON("chat", "after the switch", false, "")); c.status != 200 {
			t.Fatalf("replica %d, its first request after the promotion: %v", r, c)
		}
	}
	i := 0
	for key, first := range before {
		i++
		c := send(ctx, f.gws[i%2], apiKey, key, false, body(key))
		if c.status != 200 || c.header.Get("X-Oncegate-Dedup") != "replayed" || !bytes.Equal(c.body, first.body) {
			t.Fatalf("%s, answered before the switch, asked again after it: %v (want a byte-for-byte replay of %s)", key, c, first.body)
		}
	}
	if got := f.primary.Stats().Requests; got != n+2 {
		t.Fatalf("the provider saw %d requests, want %d", got, n+2)
	}
}
