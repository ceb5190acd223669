package quota

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/gw"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func TestRateAdmitsAMinuteAndNamesTheWait(t *testing.T) {
	clk := clock.NewFake(t0)
	l := New(clk, map[string]Tenant{"acme": {RequestsPerMinute: 60}})
	for i := range 60 {
		if ok, _, _ := l.Take("acme"); !ok {
			t.Fatalf("request %d refused within the minute's burst", i+1)
		}
	}
	ok, wait, _ := l.Take("acme")
	if ok || wait != time.Second {
		t.Fatalf("61st: ok %v retry after %v, want refused for 1s", ok, wait)
	}
	clk.Advance(500 * time.Millisecond)
	if ok, wait, _ = l.Take("acme"); ok || wait != 500*time.Millisecond {
		t.Fatalf("half a token later: %v %v", ok, wait)
	}
	clk.Advance(500 * time.Millisecond)
	if ok, _, _ = l.Take("acme"); !ok {
		t.Fatal("a refilled token was refused")
	}
	if ok, _, _ = l.Take("other"); !ok {
		t.Fatal("a tenant without limits was refused")
	}
}

func TestCostReservationsNeverPassTheCeiling(t *testing.T) {
	clk := clock.NewFake(t0)
	l := New(clk, map[string]Tenant{"acme": {CostPerDay: 1000}})
	r, ok := l.Reserve("acme", 600, t0.Add(time.Minute))
	if _, more := l.Reserve("acme", 500, t0.Add(time.Minute)); !ok || more {
		t.Fatal("want 600 reserved and 500 more refused")
	}
	if a, ok := l.Allowance("acme"); !ok || a != 400 {
		t.Fatalf("allowance %d %v, want 400", a, ok)
	}
	l.Settle(r, 250) // it cost less than its worst case
	if a, _ := l.Allowance("acme"); a != 750 {
		t.Fatalf("allowance after settling: %d, want 750", a)
	}
	clk.Set(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)) // a new UTC day
	if a, _ := l.Allowance("acme"); a != 1000 {
		t.Fatalf("allowance on a new day: %d", a)
	}
	if _, ok := l.Allowance("other"); ok {
		t.Fatal("a tenant without a ceiling has an allowance")
	}
}

// 64 goroutines spend at the ceiling at once: what is charged never passes
// the ceiling by more than one reservation, whatever the interleaving.
func TestCostCeilingUnderConcurrency(t *testing.T) {
	const ceiling, reserve = gw.NanoUSD(1_000_000), gw.NanoUSD(30_000)
	l := New(clock.NewFake(t0), map[string]Tenant{"acme": {CostPerDay: ceiling}})
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 200 {
				if res, ok := l.Reserve("acme", reserve, t0.Add(time.Minute)); ok {
					// Real costs vary, up to 10 % over the estimate.
					l.Settle(res, gw.NanoUSD(r.Int64N(int64(reserve)*11/10)))
				}
			}
		}()
	}
	wg.Wait()
	charged, reserved := l.Spent("acme")
	if reserved != 0 || charged > ceiling+reserve {
		t.Fatalf("charged %d (reserved %d) over ceiling %d + one reservation %d", charged, reserved, ceiling, reserve)
	}
	if charged < ceiling-2*reserve {
		t.Fatalf("charged only %d of %d: the ceiling refused too early", charged, ceiling)
	}
}

func TestDayIsTheUTCDay(t *testing.T) {
	for _, c := range []struct {
		at   time.Time
		want int64
	}{
		{time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC), 0},
		{time.Date(1970, 1, 1, 23, 59, 59, 0, time.UTC), 0},
		{time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC), -1},
		{time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC), -1},
		{time.Date(2026, 12, 1, 23, 30, 0, 0, time.FixedZone("UTC-5", -5*3600)), 20789}, // 04:30 UTC on the 2nd
	} {
		if got := gw.Day(c.at); got != c.want {
			t.Errorf("Day(%v) = %d, want %d", c.at, got, c.want)
		}
	}
}

// TestSeedKeepsTheDaysSpendAcrossARestart: a new process seeded with what
// the store says was charged today refuses what does not fit.
func TestSeedKeepsTheDaysSpendAcrossARestart(t *testing.T) {
	clk := clock.NewFake(t0)
	l := New(clk, map[string]Tenant{"acme": {CostPerDay: 1000}})
	l.Seed(gw.Day(t0)-1, map[string]gw.NanoUSD{"acme": 900}) // yesterday's: ignored
	if a, _ := l.Allowance("acme"); a != 1000 {
		t.Fatalf("yesterday's spend counted today: allowance %d", a)
	}
	l.Seed(gw.Day(t0), map[string]gw.NanoUSD{"acme": 900, "unknown": 5})
	if _, ok := l.Reserve("acme", 200, t0); ok {
		t.Fatal("a reservation past the seeded spend was admitted")
	}
	if a, _ := l.Allowance("acme"); a != 100 {
		t.Fatalf("allowance after the seed: %d, want 100", a)
	}
}

// TestRatesContinueAcrossARestart: a new process restored from the last
// snapshot refuses what the old one would have.
func TestRatesContinueAcrossARestart(t *testing.T) {
	clk := clock.NewFake(t0)
	lim := map[string]Tenant{"acme": {RequestsPerMinute: 60}, "free": {}}
	l := New(clk, lim)
	for range 60 {
		l.Take("acme")
	}
	snap := l.Snapshot()
	clk.Advance(500 * time.Millisecond)
	l2 := New(clk, lim)
	l2.Restore(snap)
	if ok, wait, _ := l2.Take("acme"); ok || wait != 500*time.Millisecond {
		t.Fatalf("after a restart: %v, retry after %v (want refused for 500ms)", ok, wait)
	}
	clk.Advance(500 * time.Millisecond)
	if ok, _, _ := l2.Take("acme"); !ok {
		t.Fatal("a refilled token was refused after the restart")
	}
	l3 := New(clk, lim)
	l3.Restore([]byte(`{"acme":{"tokens":-5,"at":1}}`))
	l3.Restore([]byte(`not json`))
	if ok, _, _ := l3.Take("acme"); !ok {
		t.Fatal("a malformed snapshot was restored")
	}
}
