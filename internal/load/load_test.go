package load

import (
	"net/http"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/clock"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func TestParseHeaders(t *testing.T) {
	for _, tc := range []struct {
		name  string
		h     http.Header
		left  float64
		until time.Duration
		ok    bool
	}{
		{"none", header(), 0, 0, false},
		{"openai requests", header("x-ratelimit-remaining-requests", "25", "x-ratelimit-limit-requests", "100", "x-ratelimit-reset-requests", "6m0s"),
			0.25, 6 * time.Minute, true},
		{"the least dimension wins, the latest reset", header("x-ratelimit-remaining-requests", "90", "x-ratelimit-limit-requests", "100",
			"x-ratelimit-reset-requests", "1s", "x-ratelimit-remaining-tokens", "1000", "x-ratelimit-limit-tokens", "10000",
			"x-ratelimit-reset-tokens", "20ms"), 0.1, time.Second, true},
		{"anthropic", header("anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-limit", "50",
			"anthropic-ratelimit-requests-reset", t0.Add(30*time.Second).Format(time.RFC3339)), 0, 30 * time.Second, true},
		{"no reset: a minute", header("x-ratelimit-remaining-requests", "5", "x-ratelimit-limit-requests", "10"), 0.5, time.Minute, true},
		{"an absurd reset is capped", header("x-ratelimit-remaining-requests", "5", "x-ratelimit-limit-requests", "10",
			"x-ratelimit-reset-requests", "9999h"), 0.5, time.Hour, true},
		{"malformed numbers are ignored", header("x-ratelimit-remaining-requests", "lots", "x-ratelimit-limit-requests", "10"), 0, 0, false},
		{"a zero limit is ignored", header("x-ratelimit-remaining-requests", "0", "x-ratelimit-limit-requests", "0"), 0, 0, false},
		{"more left than the limit is all", header("x-ratelimit-remaining-requests", "20", "x-ratelimit-limit-requests", "10"), 1, time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			left, until, ok := ParseHeaders(tc.h, t0)
			if ok != tc.ok || left != tc.left || ok && !until.Equal(t0.Add(tc.until)) {
				t.Fatalf("got %v %v %v, want %v %v %v", left, until.Sub(t0), ok, tc.left, tc.until, tc.ok)
			}
		})
	}
}

func FuzzParseHeaders(f *testing.F) {
	f.Add("25", "100", "6m0s", "0", "50", "2026-12-02T12:00:30Z")
	f.Add("-1", "1e309", "-5s", "NaN", "x", "")
	f.Fuzz(func(t *testing.T, rem, lim, reset, arem, alim, areset string) {
		h := header("x-ratelimit-remaining-requests", rem, "x-ratelimit-limit-requests", lim, "x-ratelimit-reset-requests", reset,
			"anthropic-ratelimit-tokens-remaining", arem, "anthropic-ratelimit-tokens-limit", alim, "anthropic-ratelimit-tokens-reset", areset)
		left, until, ok := ParseHeaders(h, t0)
		if !ok {
			return
		}
		if left < 0 || left > 1 || until.Before(t0) || until.After(t0.Add(maxReset)) {
			t.Fatalf("left %v until %v from %q %q %q / %q %q %q", left, until.Sub(t0), rem, lim, reset, arem, alim, areset)
		}
	})
}

func TestFigures(t *testing.T) {
	clk := clock.NewFake(t0)
	tb := New(clk, map[string]Limits{"own": {RPM: 4}})
	tb.Begin("a")
	tb.Begin("a")
	tb.End("a", 10)
	tb.SetRemote("a", 3, 1, time.Time{})
	if f := tb.Figures("a"); f.InFlight != 4 || f.Headroom != 1 || f.TTFT != 0 {
		t.Fatalf("in flight: %+v, want 1 here + 3 elsewhere", f)
	}
	tb.TTFT("a", 100*time.Millisecond)
	tb.TTFT("a", 400*time.Millisecond) // 100 + 0.3 × 300
	if f := tb.Figures("a"); f.TTFT != 190*time.Millisecond {
		t.Fatalf("ttft %v, want 190ms", f.TTFT)
	}
	tb.Headers("a", header("x-ratelimit-remaining-requests", "1", "x-ratelimit-limit-requests", "4", "x-ratelimit-reset-requests", "10s"))
	if f := tb.Figures("a"); f.Headroom != 0.25 {
		t.Fatalf("headroom %v, want 0.25", f.Headroom)
	}
	clk.Advance(11 * time.Second)
	if f := tb.Figures("a"); f.Headroom != 1 {
		t.Fatalf("after the reset: headroom %v, want 1", f.Headroom)
	}
	// The route's own rpm: 3 of 4 requests this minute.
	for range 3 {
		tb.Begin("own")
		tb.End("own", 0)
	}
	if f := tb.Figures("own"); f.Headroom != 0.25 {
		t.Fatalf("own rpm headroom %v, want 0.25", f.Headroom)
	}
	clk.Advance(61 * time.Second)
	if f := tb.Figures("own"); f.Headroom != 1 {
		t.Fatalf("a minute later: %v", f.Headroom)
	}
}

// A route cools until the later of what this process learned and what
// another replica shared, and stops cooling then.
func TestCooling(t *testing.T) {
	clk := clock.NewFake(t0)
	tb := New(clk, map[string]Limits{"a": {}, "b": {}})
	if c := tb.Cooling([]string{"a", "b"}); c != nil {
		t.Fatalf("nothing cools yet: %v", c)
	}
	tb.Cool("a", t0.Add(20*time.Second))
	tb.Cool("a", t0.Add(5*time.Second)) // an earlier end does not shorten it
	tb.SetRemoteCool("b", t0.Add(3*time.Second))
	c := tb.Cooling([]string{"a", "b", "unknown"})
	if len(c) != 2 || !c["a"].Equal(t0.Add(20*time.Second)) || !c["b"].Equal(t0.Add(3*time.Second)) {
		t.Fatalf("cooling %v", c)
	}
	if got := tb.Cooled("a"); !got.Equal(t0.Add(20 * time.Second)) {
		t.Fatalf("learned here: %v", got)
	}
	if got := tb.Cooled("b"); !got.IsZero() {
		t.Fatalf("b was learned elsewhere, not here: %v", got)
	}
	clk.Advance(3 * time.Second)
	if c := tb.Cooling([]string{"a", "b"}); len(c) != 1 || c["b"] != (time.Time{}) {
		t.Fatalf("at +3s only a cools: %v", c)
	}
	clk.Advance(17 * time.Second)
	if c := tb.Cooling([]string{"a", "b"}); c != nil {
		t.Fatalf("at +20s nothing cools: %v", c)
	}
}
