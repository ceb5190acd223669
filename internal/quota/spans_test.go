package quota

import (
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/clock"
)

func TestUntilCountsToTheEndOfTheSpan(t *testing.T) {
	for _, c := range []struct {
		name, span string
		now        time.Time
		want       int
	}{
		{"the day", "day", time.Date(2026, 3, 5, 23, 0, 0, 0, time.UTC), 3600},
		{"the month", "month", time.Date(2026, 2, 28, 0, 0, 0, 0, time.UTC), 86400},
		{"december to january", "month", time.Date(2026, 12, 31, 23, 59, 59, 0, time.UTC), 1},
		{"a leap february", "month", time.Date(2028, 2, 1, 0, 0, 0, 0, time.UTC), 29 * 86400},
		{"a part second rounds up", "month", time.Date(2026, 4, 30, 23, 59, 59, 500e6, time.UTC), 1},
		{"another zone", "month", time.Date(2026, 5, 1, 1, 0, 0, 0, time.FixedZone("x", 2*3600)), 3600},
		{"the lifetime never ends", "total", time.Date(2026, 4, 30, 0, 0, 0, 0, time.UTC), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Until(c.now, c.span); got != c.want {
				t.Fatalf("Until(%s, %s) = %d, want %d", c.now, c.span, got, c.want)
			}
		})
	}
}

func TestSpansReserveUnderMonthAndLifetime(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 31, 12, 0, 0, 0, time.UTC))
	var s Spans
	s.Fill(clk)
	s.SetCosts(map[string]Costs{"acme": {Month: 1000, Total: 1500}, "free": {}})
	until := clk.Now().Add(time.Minute)
	r, refused := s.Reserve("acme", 600, until)
	if refused != "" {
		t.Fatalf("600 of 1000 refused by %s", refused)
	}
	if _, refused := s.Reserve("acme", 500, until); refused != "month" {
		t.Fatalf("500 more refused by %q, want month", refused)
	}
	if a, capped := s.Allowance("acme"); !capped || a != 400 {
		t.Fatalf("allowance %d %v, want 400", a, capped)
	}
	s.Settle(r, 900)
	if _, refused := s.Reserve("acme", 101, until); refused != "month" {
		t.Fatalf("101 over 900 charged refused by %q, want month", refused)
	}
	clk.Set(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)) // a new month: the lifetime keeps its 900
	if a, _ := s.Allowance("acme"); a != 600 {
		t.Fatalf("allowance in February %d, want 600 (the lifetime's 1500 less 900)", a)
	}
	if _, refused := s.Reserve("acme", 700, until); refused != "total" {
		t.Fatalf("700 refused by %q, want total", refused)
	}
	// The month's reservation was given back when the lifetime refused.
	if a, _ := s.Month.Allowance("acme"); a != 1000 {
		t.Fatalf("February's allowance after a refusal %d, want 1000", a)
	}
	if _, capped := s.Allowance("free"); capped {
		t.Fatal("a tenant without month or lifetime ceilings is capped")
	}
	if _, refused := s.Reserve("free", 1<<40, until); refused != "" {
		t.Fatalf("an uncapped tenant refused by %s", refused)
	}
}
