package admin

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/postgres"
	"github.com/oncegate/oncegate/internal/ledger/postgres/pgtest"
	"github.com/oncegate/oncegate/internal/ledger/sqlite"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/receipt"
)

// teamsHost is a gateway of three teams, for the report alone.
type teamsHost struct{}

func (teamsHost) Policy() *policy.Policy {
	return &policy.Policy{Tenants: []*policy.Tenant{{ID: "team-a"}, {ID: "team-b"}, {ID: "team-c"}}}
}
func (teamsHost) AdminEnabled() bool                 { return true }
func (teamsHost) IsAdmin(*http.Request) bool         { return true }
func (teamsHost) IsTenant(*http.Request) bool        { return false }
func (teamsHost) KeyChanged(context.Context, string) {}

func (teamsHost) TenantChanged(context.Context, string) {}

// A month of synthetic traffic across three teams, five keys, four tags
// and eight users, written straight to the store, and the report by
// tag, key name, tenant and user beside the receipts' own sums; the
// time each report takes is logged. ONCEGATE_SPEND_RECEIPTS sets how
// many receipts (1,000 by default; docs/spend.md gives the figures at
// 1,000,000), on SQLite and, when ONCEGATE_TEST_POSTGRES is set, on
// PostgreSQL.
func TestSpendReportOfAMonth(t *testing.T) {
	n := 1000
	if s := os.Getenv("ONCEGATE_SPEND_RECEIPTS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatalf("ONCEGATE_SPEND_RECEIPTS=%q: %v", s, err)
		}
	} else if testing.Short() {
		t.Skip("-short: a month of receipts takes a while to write")
	}
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "spend.db")
		s, err := sqlite.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		reportAMonth(t, s, n, func() (int64, error) {
			db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
			if err != nil {
				return 0, err
			}
			defer db.Close()
			var size int64
			err = db.QueryRow(`SELECT SUM(pgsize) FROM dbstat WHERE name IN ('receipt_spend', 'receipt_spend_by_request')`).Scan(&size)
			return size, err
		})
	})
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.URL(t)
		s, err := postgres.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		reportAMonth(t, s, n, func() (int64, error) {
			conn, err := pgx.Connect(context.Background(), url)
			if err != nil {
				return 0, err
			}
			defer conn.Close(context.Background())
			var size int64
			err = conn.QueryRow(context.Background(), `SELECT pg_total_relation_size('receipt_spend')`).Scan(&size)
			return size, err
		})
	})
}

// reportAMonth writes n receipts and reports on them; factsSize says
// how many bytes the store's spend facts take (its table and indexes).
func reportAMonth(t *testing.T, s ledger.Store, n int, factsSize func() (int64, error)) {
	ctx := context.Background()
	month := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	keys := []struct{ id, name, team string }{
		{"key_a1", "search", "team-a"}, {"key_a2", "chat", "team-a"}, {"key_b1", "billing", "team-b"}, {"key_c1", "etl", "team-c"}, {"key_c2", "notebooks", "team-c"},
	}
	tagSets := [][]string{{"prod"}, {"prod", "eu"}, {"batch"}, {"eu"}, nil, {"batch", "experiment"}}
	want := map[string]map[string]gw.NanoUSD{"tag": {}, "key_name": {}, "tenant": {}, "user": {}}
	start := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan int, 1024)
	var failed error
	for range 16 {
		wg.Go(func() {
			for i := range work {
				k := keys[i%len(keys)]
				created := month.Add(time.Duration(i) * (30 * 24 * time.Hour / time.Duration(n)))
				rc := syntheticReceipt(i, k.team, k.id, k.name, "user-"+strconv.Itoa(i%8), tagSets[i%len(tagSets)], created)
				body, err := rc.JSON()
				if err == nil {
					err = s.PutReceipt(ctx, &ledger.StoredReceipt{Tenant: k.team, RequestID: rc.RequestID, Body: body,
						Charge: int64(gw.NanoFromUSD(rc.Totals.CostUSD)), At: created, Key: k.id})
				}
				mu.Lock()
				if err != nil {
					failed = err
				}
				cost := gw.NanoFromUSD(rc.Totals.CostUSD)
				want["key_name"][k.name] += cost
				want["tenant"][k.team] += cost
				want["user"][rc.User] += cost
				tags := rc.Tags
				if len(tags) == 0 {
					tags = []string{""}
				}
				for _, tag := range tags {
					want["tag"][tag] += cost
				}
				mu.Unlock()
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if failed != nil {
		t.Fatal(failed)
	}
	if err := s.Ping(ctx); err != nil { // a commit after every queued write
		t.Fatal(err)
	}
	t.Logf("%d receipts written in %s", n, time.Since(start).Round(time.Millisecond))
	if size, err := factsSize(); err != nil {
		t.Logf("the spend facts' size: %v", err)
	} else {
		t.Logf("the spend facts take %d bytes, %.0f a receipt", size, float64(size)/float64(n))
	}
	a := New(Deps{Gateway: teamsHost{}, Store: s, Clock: clock.System{}})
	for _, by := range []string{"tag", "key_name", "tenant", "user"} {
		began := time.Now()
		rep, err := a.SpendReport(ctx, by, month, month.AddDate(0, 1, 0), SpendFilter{})
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(began)
		if len(rep.Rows) != len(want[by]) || rep.Total.Requests != n {
			t.Fatalf("by %s: %d rows, %d requests; want %d rows, %d requests", by, len(rep.Rows), rep.Total.Requests, len(want[by]), n)
		}
		line := ""
		for _, r := range rep.Rows {
			if r.cost != want[by][r.Group] {
				t.Errorf("by %s, %q: report %d nano-USD, receipts %d", by, r.Group, r.cost, want[by][r.Group])
			}
			line += fmt.Sprintf(" %s=$%.6f (receipts $%.6f)", r.Group, r.CostUSD, want[by][r.Group].USD())
		}
		t.Logf("by %-8s %6.2f s over %d receipts:%s", by, took.Seconds(), n, line)
	}
}

// syntheticReceipt is a receipt of one or two attempts as the gateway
// writes them.
func syntheticReceipt(i int, tenant, keyID, keyName, user string, tags []string, created time.Time) *receipt.Receipt {
	rc := &receipt.Receipt{RequestID: fmt.Sprintf("%s-%09d", created.Format("20060102T150405"), i), Tenant: tenant, Operation: "chat.completions",
		Model: "gpt-4o", KeyID: keyID, KeyName: keyName, User: user, Tags: tags, KeySHA256: "k", RequestSHA256: "r", PolicySHA256: "p",
		RetryOwner: receipt.RetryOwner, CreatedAt: created, Deadline: created.Add(time.Minute), Terminal: "succeeded", Reason: "completed"}
	attempts := 1 + i%3/2
	var total gw.NanoUSD
	for a := range attempts {
		in, out := int64(200+i%700), int64(50+i%300)
		cost := gw.NanoUSD(in*2500 + out*10000) // $2.50 and $10 a million tokens
		if a < attempts-1 {
			out, cost = 0, 0 // a 503 before the answer
		}
		total += cost
		rc.Attempts = append(rc.Attempts, receipt.Attempt{Ordinal: a + 1, Route: "azure-east", Provider: "azure", OutcomeClass: "success",
			Kind: "success", HTTPStatus: 200, StartedAt: created, ObservedAt: created.Add(time.Second), NotBefore: created,
			Usage: gw.Usage{InputTokens: in, OutputTokens: out}, CostUSD: cost.USD()})
	}
	rc.Totals = receipt.Totals{Attempts: attempts, CostUSD: total.USD()}
	return rc
}
