package ledgertest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
)

// spendReceipt is a receipt as the test writes it: the members the
// spend facts come from, with the JSON names the gateway's receipts use.
type spendReceipt struct {
	RequestID string    `json:"request_id"`
	Tenant    string    `json:"tenant"`
	Model     string    `json:"model"`
	KeyID     string    `json:"key_id,omitempty"`
	KeyName   string    `json:"key_name,omitempty"`
	User      string    `json:"user,omitempty"`
	Tags      []string  `json:"tags,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	Attempts  []struct {
		Route string `json:"route"`
		Usage struct {
			InputTokens  int64 `json:"input_tokens"`
			OutputTokens int64 `json:"output_tokens"`
		} `json:"usage"`
		CostUSD        float64 `json:"cost_usd"`
		OrphansCostUSD float64 `json:"orphans_cost_usd,omitempty"`
	} `json:"attempts"`
	Totals struct {
		Attempts int     `json:"attempts"`
		CostUSD  float64 `json:"cost_usd"`
	} `json:"totals"`
	// Other members the facts do not read.
	Dedup struct {
		Joined int `json:"joined"`
	} `json:"dedup"`
}

func (r *spendReceipt) body(t *testing.T) []byte {
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// randomReceipt is a receipt of tenant created at created, its members
// drawn from small sets so that groups repeat.
func randomReceipt(rng *rand.Rand, id, tenant string, created time.Time) *spendReceipt {
	r := &spendReceipt{RequestID: id, Tenant: tenant, CreatedAt: created, Model: []string{"gpt-4o", "claude", "mini"}[rng.IntN(3)]}
	if k := rng.IntN(4); k > 0 {
		r.KeyID = fmt.Sprintf("key_%s_%d", tenant, k)
		r.KeyName = []string{"web", "batch", "web"}[k-1] // two keys share a name
		if rng.IntN(10) == 0 {
			r.KeyName = "renamed"
		}
	}
	if u := rng.IntN(5); u > 0 {
		r.User = fmt.Sprintf("user-%d", u)
	}
	for _, tag := range []string{"prod", "eu", "batch job", "ünï,cøde"} {
		if rng.IntN(3) == 0 {
			r.Tags = append(r.Tags, tag)
		}
	}
	n := 1 + rng.IntN(3)
	var total float64
	for a := range n {
		var at struct {
			Route string `json:"route"`
			Usage struct {
				InputTokens  int64 `json:"input_tokens"`
				OutputTokens int64 `json:"output_tokens"`
			} `json:"usage"`
			CostUSD        float64 `json:"cost_usd"`
			OrphansCostUSD float64 `json:"orphans_cost_usd,omitempty"`
		}
		at.Route = []string{"east", "west"}[rng.IntN(2)]
		at.Usage.InputTokens, at.Usage.OutputTokens = rng.Int64N(5000), rng.Int64N(2000)
		// Prices as float arithmetic makes them: many digits, some past
		// the nano-dollar.
		at.CostUSD = float64(at.Usage.InputTokens)*2.5e-6 + float64(at.Usage.OutputTokens)*1.0000003e-5
		if a < n-1 && rng.IntN(2) == 0 {
			at.CostUSD = 0
		}
		if rng.IntN(5) == 0 {
			at.OrphansCostUSD = rng.Float64() / 1000
		}
		total += at.CostUSD
		r.Attempts = append(r.Attempts, at)
	}
	r.Totals.Attempts, r.Totals.CostUSD = n, total
	return r
}

// wantSums sums receipts for q from the receipts themselves, as the
// report once did by reading every receipt: the oracle the stores'
// sums are held to.
func wantSums(rcs []*spendReceipt, q ledger.SpendQuery) []ledger.SpendSum {
	type gk struct {
		group, name string
		day         int64
	}
	groups := map[gk]*ledger.SpendSum{}
	for _, r := range rcs {
		if q.Tenants != nil && !slices.Contains(q.Tenants, r.Tenant) || r.CreatedAt.Before(q.From) || !r.CreatedAt.Before(q.To) ||
			q.Key != "" && r.KeyID != q.Key || q.KeyName != "" && r.KeyName != q.KeyName || q.User != "" && r.User != q.User ||
			q.Model != "" && r.Model != q.Model || q.Tag != "" && !slices.Contains(r.Tags, q.Tag) {
			continue
		}
		var k gk
		switch q.By {
		case ledger.ByTenant:
			k.group = r.Tenant
		case ledger.ByKey:
			k.group, k.name = r.KeyID, r.KeyName
		case ledger.ByKeyName:
			k.group = r.KeyName
		case ledger.ByUser:
			k.group = r.User
		case ledger.ByModel:
			k.group = r.Model
		case ledger.ByDay:
			k.day = r.CreatedAt.Unix() / 86400
		case ledger.ByTags:
			k.group = ""
			if len(r.Tags) > 0 {
				k.group = "\x1f" + strings.Join(r.Tags, "\x1f") + "\x1f"
			}
		}
		s := groups[k]
		if s == nil {
			s = &ledger.SpendSum{Group: k.group, Name: k.name, Day: k.day}
			if q.By == ledger.ByKey {
				s.First = r.RequestID
			}
			groups[k] = s
		}
		if q.By == ledger.ByKey {
			s.First = min(s.First, r.RequestID)
		}
		s.Requests++
		s.Attempts += int64(r.Totals.Attempts)
		s.Cost += int64(gw.NanoFromUSD(r.Totals.CostUSD))
		for _, a := range r.Attempts {
			s.InputTokens += a.Usage.InputTokens
			s.OutputTokens += a.Usage.OutputTokens
			s.Orphans += int64(gw.NanoFromUSD(a.OrphansCostUSD))
		}
	}
	out := []ledger.SpendSum{}
	for _, s := range groups {
		out = append(out, *s)
	}
	ledger.SortSums(out)
	return out
}

// checkSums compares a store's sums for q with the receipts'.
func checkSums(t *testing.T, s ledger.Store, rcs []*spendReceipt, q ledger.SpendQuery) {
	t.Helper()
	got, err := s.SpendSums(context.Background(), q)
	if err != nil {
		t.Fatalf("spend sums %+v: %v", q, err)
	}
	if got == nil {
		got = []ledger.SpendSum{}
	}
	ledger.SortSums(got)
	if want := wantSums(rcs, q); !slices.Equal(got, want) {
		t.Fatalf("spend sums for %+v:\n got  %v\n want %v", q, got, want)
	}
}

// finishWith claims and finishes request id of tenant with body as its
// receipt.
func finishWith(t *testing.T, s ledger.Store, id, tenant string, body []byte, release bool) {
	t.Helper()
	ctx := context.Background()
	r := rec("k:"+id, id)
	r.Tenant = tenant
	if _, created, err := s.Claim(ctx, r, []ledger.Event{ev(id, 1, 1, ledger.EvCreated)}); err != nil || !created {
		t.Fatalf("claim %s: %v %v", id, created, err)
	}
	f := finish(id, 1, 2)
	f.Tenant, f.Receipt, f.Release, f.Charge = tenant, body, release, 1
	if err := s.Finish(ctx, f); err != nil {
		t.Fatalf("finish %s: %v", id, err)
	}
}

// settled commits every queued write (a receipt put is queued).
func settled(t *testing.T, s ledger.Store) {
	t.Helper()
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// runSpend checks the spend facts kept beside receipts (docs/spend.md,
// "How the report reads").
func runSpend(t *testing.T, open Opener) {
	ctx := context.Background()
	t.Run("spend facts sum as the receipts do, by every grouping and filter", func(t *testing.T) {
		s := open(t, false)
		seed := uint64(time.Now().UnixNano())
		t.Logf("seed %d", seed)
		rng := rand.New(rand.NewPCG(seed, 7))
		start := time.Date(2026, 10, 30, 22, 0, 0, 0, time.UTC)
		var rcs []*spendReceipt
		var lapsed []*ledger.Finish
		for i := range 120 {
			id := fmt.Sprintf("sp-%04d", i)
			tenant := []string{"acme", "beta", "gamma"}[rng.IntN(3)]
			created := start.Add(time.Duration(rng.Int64N(int64(72 * time.Hour))))
			if i%17 == 0 { // creation times on the edges of a day
				created = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i%2) * -time.Nanosecond)
			}
			r := randomReceipt(rng, id, tenant, created)
			rcs = append(rcs, r)
			switch i % 4 {
			case 0, 1: // finished by its owner
				finishWith(t, s, id, tenant, r.body(t), i%8 == 1)
			case 2: // a receipt rebuilt after recovery
				if err := s.PutReceipt(ctx, &ledger.StoredReceipt{Tenant: tenant, RequestID: id, Body: r.body(t), Charge: 1, At: created}); err != nil {
					t.Fatal(err)
				}
			case 3: // settled by recovery
				rr := rec("k:"+id, id)
				rr.Tenant, rr.Owner = tenant, "gone"
				if _, _, err := s.Claim(ctx, rr, []ledger.Event{ev(id, 1, 1, ledger.EvCreated)}); err != nil {
					t.Fatal(err)
				}
				f := finish(id, 1, 2)
				f.Tenant, f.Receipt, f.At, f.Takeover = tenant, r.body(t), t0.Add(time.Hour), true
				lapsed = append(lapsed, f)
			}
		}
		if ids, err := s.Settle(ctx, lapsed); err != nil || len(ids) != len(lapsed) {
			t.Fatalf("settled %d of %d: %v", len(ids), len(lapsed), err)
		}
		// Receipts that are not a receipt's JSON have no facts.
		finishWith(t, s, "sp-not-json", "acme", []byte(`not json`), false)
		finishWith(t, s, "sp-no-created", "acme", []byte(`{"request_id":"sp-no-created","totals":{"cost_usd":1}}`), false)
		settled(t, s)
		waitFor(t, func() bool { _, err := s.Receipt(ctx, rcs[2].Tenant, rcs[2].RequestID); return err == nil })
		all := []ledger.SpendQuery{{From: start, To: start.Add(72 * time.Hour)}}
		for range 60 {
			q := ledger.SpendQuery{From: start.Add(time.Duration(rng.Int64N(int64(80*time.Hour))) - 4*time.Hour)}
			q.To = q.From.Add(time.Duration(1 + rng.Int64N(int64(60*time.Hour))))
			switch rng.IntN(3) {
			case 0:
				q.Tenants = []string{"acme"}
			case 1:
				q.Tenants = []string{"beta", "gamma", "nobody"}
			}
			switch rng.IntN(7) {
			case 0:
				q.Key = "key_acme_1"
			case 1:
				q.KeyName = "web"
			case 2:
				q.User = "user-2"
			case 3:
				q.Model = "claude"
			case 4:
				q.Tag = []string{"prod", "batch job", "ünï,cøde", "e"}[rng.IntN(4)]
			}
			all = append(all, q)
		}
		// No tenant at all: nothing.
		all = append(all, ledger.SpendQuery{Tenants: []string{}, From: start, To: start.Add(72 * time.Hour)})
		// The edges of [from, to): a receipt created at from counts, one
		// at to does not.
		edge := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
		all = append(all, ledger.SpendQuery{From: edge, To: edge.Add(time.Nanosecond)}, ledger.SpendQuery{From: edge.Add(-time.Hour), To: edge},
			ledger.SpendQuery{From: edge.Add(-time.Nanosecond), To: edge})
		for _, q := range all {
			for _, by := range []string{ledger.ByTenant, ledger.ByKey, ledger.ByKeyName, ledger.ByUser, ledger.ByModel, ledger.ByDay, ledger.ByTags} {
				q.By = by
				checkSums(t, s, rcs, q)
			}
		}
		// Not vacuous: the whole window holds every receipt, each day's
		// edge its own.
		got, err := s.SpendSums(ctx, ledger.SpendQuery{From: start, To: start.Add(72 * time.Hour), By: ledger.ByTenant})
		n := int64(0)
		for _, g := range got {
			n += g.Requests
		}
		if err != nil || n != int64(len(rcs)) {
			t.Fatalf("%d requests summed of %d (%v)", n, len(rcs), err)
		}
		got, _ = s.SpendSums(ctx, ledger.SpendQuery{From: edge, To: edge.Add(time.Nanosecond), By: ledger.ByTenant})
		if len(got) == 0 {
			t.Fatal("no receipt created at the edge was summed")
		}
	})
	t.Run("a receipt put again, or finished and put, counts once", func(t *testing.T) {
		s := open(t, false)
		created := t0.Add(-time.Hour)
		rng := rand.New(rand.NewPCG(1, 2))
		a, b := randomReceipt(rng, "once-a", "acme", created), randomReceipt(rng, "once-b", "acme", created.Add(time.Minute))
		finishWith(t, s, "once-a", "acme", a.body(t), false)
		// Recovery rebuilds a receipt the request already has: nothing changes.
		other := *a
		other.Totals.CostUSD, other.CreatedAt = 99, created.Add(-24*time.Hour)
		if err := s.PutReceipt(ctx, &ledger.StoredReceipt{Tenant: "acme", RequestID: "once-a", Body: other.body(t), Charge: 1, At: created}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := s.PutReceipt(ctx, &ledger.StoredReceipt{Tenant: "acme", RequestID: "once-b", Body: b.body(t), Charge: 1, At: created}); err != nil {
				t.Fatal(err)
			}
		}
		// A receipt put before its request finishes is replaced by the
		// finish's, and its facts with it (created at another time too).
		c := randomReceipt(rng, "once-c", "acme", created.Add(-30*time.Hour))
		if err := s.PutReceipt(ctx, &ledger.StoredReceipt{Tenant: "acme", RequestID: "once-c", Body: c.body(t), Charge: 1, At: created}); err != nil {
			t.Fatal(err)
		}
		settled(t, s)
		c2 := randomReceipt(rng, "once-c", "acme", created.Add(2*time.Minute))
		finishWith(t, s, "once-c", "acme", c2.body(t), false)
		if body, err := s.Receipt(ctx, "acme", "once-c"); err != nil || string(body) != string(c2.body(t)) {
			t.Fatalf("the finish's receipt: %s %v", body, err)
		}
		settled(t, s)
		// A receipt's dedup counts change its body, not its facts.
		waitFor(t, func() bool { _, err := s.Receipt(ctx, "acme", "once-b"); return err == nil })
		if err := s.AddDedup(ctx, "acme", "once-a", 2, 1, 1); err != nil {
			t.Fatal(err)
		}
		settled(t, s)
		for _, by := range []string{ledger.ByTenant, ledger.ByKey, ledger.ByDay, ledger.ByTags} {
			checkSums(t, s, []*spendReceipt{a, b, c2}, ledger.SpendQuery{From: created.Add(-48 * time.Hour), To: t0, By: by})
		}
	})
	t.Run("a finish's own facts are kept as given, its receipt not decoded", func(t *testing.T) {
		s := open(t, false)
		created := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
		r := randomReceipt(rand.New(rand.NewPCG(1, 2)), "sp-given", "acme", created)
		rr := rec("k:sp-given", "sp-given")
		rr.Tenant = "acme"
		if _, _, err := s.Claim(ctx, rr, []ledger.Event{ev("sp-given", 1, 1, ledger.EvCreated)}); err != nil {
			t.Fatal(err)
		}
		f := finish("sp-given", 1, 2)
		// Facts unlike the receipt's, and with another id and tenant,
		// which the finish's own replace: the store must keep these.
		given := ledger.SpendFacts{RequestID: "elsewhere", Tenant: "other", Created: ledger.UnixNano(created), KeyName: "given",
			Attempts: 7, InputTokens: 11, OutputTokens: 13, Cost: 777, Orphans: 5}
		f.Tenant, f.Receipt, f.Charge, f.Facts = "acme", r.body(t), 1, &given
		if err := s.Finish(ctx, f); err != nil {
			t.Fatal(err)
		}
		settled(t, s)
		var got []ledger.SpendSum
		waitFor(t, func() bool {
			got, _ = s.SpendSums(ctx, ledger.SpendQuery{From: created, To: created.Add(time.Second), By: ledger.ByKeyName})
			return len(got) == 1
		})
		if g := got[0]; g.Group != "given" || g.Requests != 1 || g.Attempts != 7 || g.InputTokens != 11 || g.OutputTokens != 13 || g.Cost != 777 || g.Orphans != 5 {
			t.Fatalf("the finish's facts summed as %+v", g)
		}
		if other, _ := s.SpendSums(ctx, ledger.SpendQuery{Tenants: []string{"other"}, From: created, To: created.Add(time.Second), By: ledger.ByTenant}); len(other) != 0 {
			t.Fatalf("the facts' own tenant was kept: %+v", other)
		}
	})
	t.Run("the sweep deletes a receipt's facts with it", func(t *testing.T) {
		s := open(t, false)
		rng := rand.New(rand.NewPCG(3, 4))
		var kept []*spendReceipt
		for i, c := range []struct {
			created time.Time
			release bool
		}{{t0.Add(-3 * time.Hour), true}, {t0.Add(-2 * time.Hour), false}, {t0.Add(-time.Hour), true}, {t0.Add(time.Minute), true}} {
			id := fmt.Sprintf("swept-%d", i)
			r := randomReceipt(rng, id, "acme", c.created)
			r2 := rec("k:"+id, id)
			r2.CreatedAt = c.created
			e := ev(id, 1, 1, ledger.EvCreated)
			e.At = c.created
			if _, _, err := s.Claim(ctx, r2, []ledger.Event{e}); err != nil {
				t.Fatal(err)
			}
			f := finish(id, 1, 2)
			f.Receipt, f.Release = r.body(t), c.release
			if err := s.Finish(ctx, f); err != nil {
				t.Fatal(err)
			}
			if !c.release || c.created.After(t0) {
				kept = append(kept, r) // a record still, or newer than the cutoff
			}
		}
		q := ledger.SpendQuery{From: t0.Add(-24 * time.Hour), To: t0.Add(time.Hour), By: ledger.ByTenant}
		if n, err := s.Sweep(ctx, t0); err != nil || n != 2 {
			t.Fatalf("swept %d: %v", n, err)
		}
		checkSums(t, s, kept, q)
		if got, _ := s.SpendSums(ctx, q); len(got) != 1 || got[0].Requests != 2 {
			t.Fatalf("after the sweep: %v", got)
		}
	})
}

// OldReceipt is a receipt a database held before it kept spend facts.
type OldReceipt struct {
	RequestID, Tenant string
	Body              []byte
	r                 *spendReceipt
}

// OldReceipts are n receipts (and one body that is not a receipt's JSON)
// for a migration test to store as the schema before spend facts did:
// CheckMigratedSpend then checks the migrated store's sums.
func OldReceipts(t *testing.T, n int) []OldReceipt {
	rng := rand.New(rand.NewPCG(uint64(n), 11))
	start := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	out := []OldReceipt{{RequestID: "old-broken", Tenant: "acme", Body: []byte(`{"request_id":`)}}
	for i := range n {
		id := fmt.Sprintf("old-%06d", i)
		r := randomReceipt(rng, id, []string{"acme", "beta"}[i%2], start.Add(time.Duration(i)*time.Minute))
		out = append(out, OldReceipt{RequestID: id, Tenant: r.Tenant, Body: r.body(t), r: r})
	}
	return out
}

// CheckMigratedSpend checks that a store migrated from a database that
// held old sums them as the receipts do, by every grouping.
func CheckMigratedSpend(t *testing.T, s ledger.Store, old []OldReceipt) {
	t.Helper()
	var rcs []*spendReceipt
	for _, o := range old {
		if o.r != nil {
			rcs = append(rcs, o.r)
		}
	}
	for _, by := range []string{ledger.ByTenant, ledger.ByKey, ledger.ByKeyName, ledger.ByUser, ledger.ByModel, ledger.ByDay, ledger.ByTags} {
		checkSums(t, s, rcs, ledger.SpendQuery{From: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), By: by})
	}
	got, err := s.SpendSums(context.Background(), ledger.SpendQuery{From: time.Unix(0, 1), To: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), By: ledger.ByTenant})
	n := int64(0)
	for _, g := range got {
		n += g.Requests
	}
	if err != nil || n != int64(len(rcs)) {
		t.Fatalf("after the migration %d receipts have spend facts, want %d (%v)", n, len(rcs), err)
	}
}
