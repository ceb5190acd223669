package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	goredis "github.com/redis/go-redis/v9"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/coord/redis"
	"github.com/oncegate/oncegate/internal/gateway"
	"github.com/oncegate/oncegate/internal/ledger/postgres"
	"github.com/oncegate/oncegate/internal/ledger/postgres/pgtest"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/replica"
)

// shared is a PostgreSQL schema and a Redis key prefix of the benchmark's
// own, dropped when it ends.
type shared struct {
	pgURL, redisURL string
	drop            func()
}

func newShared(ctx context.Context, pgBase, redisBase string) (*shared, error) {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	tag := hex.EncodeToString(b)
	pgURL, dropSchema, err := pgtest.Scratch(ctx, pgBase, "bench_")
	if err != nil {
		return nil, fmt.Errorf("postgres %s: %w", postgres.Redact(pgBase), err)
	}
	ru, err := url.Parse(redisBase)
	if err != nil {
		dropSchema()
		return nil, err
	}
	prefix := "bench-" + tag + ":"
	rq := ru.Query()
	rq.Set("key_prefix", prefix)
	ru.RawQuery = rq.Encode()
	s := &shared{pgURL: pgURL, redisURL: ru.String()}
	s.drop = func() {
		dropSchema()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if opts, err := goredis.ParseURL(redisBase); err == nil {
			rdb := goredis.NewClient(opts)
			iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				rdb.Del(ctx, iter.Val())
			}
			_ = rdb.Close()
		}
	}
	return s, nil
}

// replicaGateway is one gateway serving over the shared store and
// coordination.
type replicaGateway struct {
	url string
	co  *redis.Coordinator
}

// startReplica serves the policy in process as one replica would; it
// stops when ctx ends.
func startReplica(ctx context.Context, pol *policy.Policy, secrets *config.Secrets, sh *shared) (*replicaGateway, error) {
	store, err := postgres.Open(ctx, sh.pgURL)
	if err != nil {
		return nil, err
	}
	opts := gateway.Options{Ledger: store, Owner: uuid.Must(uuid.NewV7()).String()}
	co, err := replica.Share(ctx, pol, sh.redisURL, store, nil, &opts)
	if err != nil {
		_ = store.Close()
		return nil, err
	}
	g, err := gateway.New(pol, secrets, opts)
	if err != nil {
		_ = co.Close()
		_ = store.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() {
		_ = g.Serve(ctx, ln)
		g.Close()
		_ = co.Close()
		_ = store.Close()
	}()
	return &replicaGateway{url: "http://" + ln.Addr().String(), co: co}, nil
}

// joinLatency measures how long a chunk takes to reach a client that
// joined a stream on another replica, beyond the time it takes to reach
// the owner's own client: the stream goes to replica A's client, the
// same key to replica B's, and each chunk's arrival is compared.
func joinLatency(ctx context.Context, o options, out io.Writer) error {
	m, mockURL, err := startMock(ctx, 0, 2*time.Millisecond, 300)
	if err != nil {
		return err
	}
	_ = m
	pol, secrets, err := benchPolicy(mockURL)
	if err != nil {
		return err
	}
	sh, err := newShared(ctx, o.postgres, o.redis)
	if err != nil {
		return err
	}
	defer sh.drop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a, err := startReplica(ctx, pol, secrets, sh)
	if err != nil {
		return err
	}
	b, err := startReplica(ctx, pol, secrets, sh)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	var lat []time.Duration
	rounds := max(10, int(o.duration/time.Second))
	for i := range rounds {
		key := fmt.Sprintf("join-%d-%d", time.Now().UnixNano(), i)
		body := []byte(`{"model":"bench","stream":true,"messages":[{"role":"user","content":"Join latency ` + key + `"}]}`)
		var owner, joiner []time.Time
		started := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(2)
		var errA, errB error
		go func() {
			defer wg.Done()
			owner, errA = lineTimes(client, a.url, key, body, started)
		}()
		<-started
		go func() {
			defer wg.Done()
			joiner, errB = lineTimes(client, b.url, key, body, nil)
		}()
		wg.Wait()
		if errA != nil || errB != nil {
			return fmt.Errorf("round %d: %v %v", i, errA, errB)
		}
		if len(owner) != len(joiner) {
			return fmt.Errorf("round %d: the owner's client read %d lines, the joiner's %d", i, len(owner), len(joiner))
		}
		// Lines the joiner got as backlog (written before it joined) say
		// nothing of the live path: count those it got live.
		for j := range owner {
			if j > 0 && joiner[j].Sub(joiner[j-1]) > 500*time.Microsecond && owner[j].After(joiner[0]) {
				lat = append(lat, joiner[j].Sub(owner[j]))
			}
		}
	}
	slices.Sort(lat)
	if len(lat) == 0 {
		return fmt.Errorf("no live chunks measured")
	}
	fmt.Fprintf(out, "cross-replica join: %d live chunks over %d streams; a chunk reaches the joiner on the other replica after the owner's client by p50 %v, p90 %v, p99 %v, max %v\n",
		len(lat), rounds, round(pct(lat, 0.5)), round(pct(lat, 0.9)), round(pct(lat, 0.99)), round(lat[len(lat)-1]))
	return nil
}

// lineTimes streams a keyed request and returns when each data line
// arrived; started is closed at the first content line.
func lineTimes(client *http.Client, base, key string, body []byte, started chan struct{}) ([]time.Time, error) {
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+benchKey)
	req.Header.Set("Idempotency-Key", key)
	res, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return nil, fmt.Errorf("status %d", res.StatusCode)
	}
	var times []time.Time
	rd := bufio.NewReader(res.Body)
	for {
		line, err := rd.ReadSlice('\n')
		if bytes.HasPrefix(line, []byte("data: ")) {
			times = append(times, time.Now())
			if started != nil && bytes.Contains(line, contentMark) {
				close(started)
				started = nil
			}
		}
		if err == io.EOF {
			return times, nil
		}
		if err != nil && err != bufio.ErrBufferFull {
			return times, err
		}
	}
}

// roundTrips formats Redis round trips per logical request.
func roundTrips(n int64, requests int64) string {
	if requests == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(n)/float64(requests), 'f', 2, 64)
}
