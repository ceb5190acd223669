package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/memory"
	"github.com/oncegate/oncegate/internal/ledger/postgres"
	"github.com/oncegate/oncegate/internal/ledger/postgres/pgtest"
	"github.com/oncegate/oncegate/internal/ledger/sqlite"
	"github.com/oncegate/oncegate/internal/receipt"
)

// The report summed from the stores' spend facts equals the report
// summed from the receipts themselves — every receipt read and decoded,
// as the report once was — row by row and to the nano-dollar, for every
// grouping and filter, over random receipts on each backend.
func TestSpendReportEqualsDecodedReceipts(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	t.Run("memory", func(t *testing.T) { reportEqualsReceipts(t, memory.New(0), seed) })
	t.Run("sqlite", func(t *testing.T) {
		s, err := sqlite.Open(filepath.Join(t.TempDir(), "spend.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		reportEqualsReceipts(t, s, seed)
	})
	t.Run("postgres", func(t *testing.T) {
		s, err := postgres.Open(context.Background(), pgtest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		reportEqualsReceipts(t, s, seed)
	})
}

func reportEqualsReceipts(t *testing.T, s ledger.Store, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 3))
	start := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	for i := range 300 {
		tenant := []string{"team-a", "team-b", "team-c", "team-x"}[rng.IntN(4)] // team-x: no longer configured
		created := start.Add(time.Duration(rng.Int64N(int64(5 * 24 * time.Hour))))
		var tags []string
		for _, tag := range []string{"prod", "eu", "batch"} {
			if rng.IntN(3) == 0 {
				tags = append(tags, tag)
			}
		}
		k := rng.IntN(3)
		rc := syntheticReceipt(i, tenant, fmt.Sprintf("key_%s_%d", tenant, k), []string{"web", "etl", "web"}[k], fmt.Sprintf("user-%d", rng.IntN(4)), tags, created)
		rc.Model = []string{"gpt-4o", "claude"}[rng.IntN(2)]
		for a := range rc.Attempts {
			rc.Attempts[a].Route = []string{"east", "west"}[rng.IntN(2)]
			if rng.IntN(4) == 0 {
				rc.Attempts[a].OrphansCostUSD = rng.Float64() / 100
			}
		}
		body, err := rc.JSON()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.PutReceipt(ctx, &ledger.StoredReceipt{Tenant: tenant, RequestID: rc.RequestID, Body: body, At: created}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	a := New(Deps{Gateway: teamsHost{}, Store: s, Clock: clock.System{}})
	filters := []SpendFilter{{}, {Tenant: "team-b"}, {Tenant: "team-x"}, {Key: "key_team-a_1"}, {KeyName: "web"}, {User: "user-2"}, {Tag: "eu"}, {Model: "claude"},
		{Tag: "batch", User: "user-1"}}
	windows := [][2]time.Time{{start.Add(30 * time.Hour), start.Add(77 * time.Hour)}, {start, start.AddDate(0, 0, 5)}, {start.AddDate(0, 0, 3), start.AddDate(0, 0, 4)}}
	if testing.Short() {
		windows = windows[:1] // -short: one window, part of a day to part of another
	}
	checked := 0
	for _, by := range spendGroups {
		for _, f := range filters {
			for _, w := range windows {
				got, err := a.SpendReport(ctx, by, w[0], w[1], f)
				if err != nil {
					t.Fatal(err)
				}
				want := decodedReport(t, s, by, w[0], w[1], f)
				gj, _ := json.Marshal(got.Rows)
				wj, _ := json.Marshal(want.Rows)
				if !slices.Equal(got.Rows, want.Rows) || got.Total != want.Total {
					t.Fatalf("by %s, %+v, [%s, %s):\n report   %s total %+v\n receipts %s total %+v", by, f, w[0], w[1], gj, got.Total, wj, want.Total)
				}
				checked += want.Total.Requests
			}
		}
	}
	if checked == 0 {
		t.Fatal("no receipt was in any report")
	}
}

// decodedReport is the report as it was summed before spend facts: every
// receipt of each tenant read, decoded, and added by group.
func decodedReport(t *testing.T, s ledger.Store, by string, from, to time.Time, f SpendFilter) *SpendReport {
	t.Helper()
	ctx := context.Background()
	tenants := []string{"team-a", "team-b", "team-c"}
	if f.Tenant != "" {
		tenants = []string{f.Tenant}
	}
	groups := map[string]*SpendRow{}
	row := func(k string) *SpendRow {
		if groups[k] == nil {
			groups[k] = &SpendRow{Group: k}
		}
		return groups[k]
	}
	var total SpendRow
	for _, tenant := range tenants {
		var all [][]byte
		for after := ""; ; {
			page, err := s.Receipts(ctx, tenant, 100, after)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, page...)
			if len(page) < 100 {
				break
			}
			var last receipt.Receipt
			if err := json.Unmarshal(page[len(page)-1], &last); err != nil {
				t.Fatal(err)
			}
			after = last.RequestID
		}
		for _, b := range all {
			rc := new(spendFacts)
			if err := json.Unmarshal(b, rc); err != nil {
				t.Fatal(err)
			}
			if rc.CreatedAt.Before(from) || !rc.CreatedAt.Before(to) || !f.keep(rc) {
				continue
			}
			addWhole(&total, rc)
			var keys []string
			switch by {
			case "route":
				seen := map[string]bool{}
				for _, at := range rc.Attempts {
					r := row(at.Route)
					if !seen[at.Route] {
						seen[at.Route] = true
						r.Requests++
					}
					r.Attempts++
					r.InputTokens += at.Usage.InputTokens
					r.OutputTokens += at.Usage.OutputTokens
					r.cost += gw.NanoFromUSD(at.CostUSD)
					r.orphans += gw.NanoFromUSD(at.OrphansCostUSD)
				}
				continue
			case "tag":
				keys = rc.Tags
				if len(keys) == 0 {
					keys = []string{""}
				}
			case "tenant":
				keys = []string{rc.Tenant}
			case "key":
				keys = []string{rc.KeyID}
				row(rc.KeyID).Name = rc.KeyName
			case "key_name":
				keys = []string{rc.KeyName}
			case "user":
				keys = []string{rc.User}
			case "model":
				keys = []string{rc.Model}
			case "day":
				keys = []string{rc.CreatedAt.UTC().Format(time.DateOnly)}
			case "month":
				keys = []string{rc.CreatedAt.UTC().Format("2006-01")}
			}
			for _, k := range keys {
				addWhole(row(k), rc)
			}
		}
	}
	rep := &SpendReport{Rows: []SpendRow{}}
	for _, r := range groups {
		r.CostUSD, r.OrphansCostUSD = r.cost.USD(), r.orphans.USD()
		rep.Rows = append(rep.Rows, *r)
	}
	slices.SortFunc(rep.Rows, func(a, b SpendRow) int {
		if a.Group < b.Group {
			return -1
		}
		if a.Group > b.Group {
			return 1
		}
		return 0
	})
	total.CostUSD, total.OrphansCostUSD = total.cost.USD(), total.orphans.USD()
	rep.Total = total
	return rep
}
