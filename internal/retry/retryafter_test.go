package retry

import (
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		ra, ms string
		want   time.Duration
		wantOK bool
	}{
		{name: "delta seconds", ra: "2", want: 2 * time.Second, wantOK: true},
		{name: "zero", ra: "0", want: 0, wantOK: true},
		{name: "fractional seconds", ra: "1.5", want: 1500 * time.Millisecond, wantOK: true},
		{name: "surrounding space", ra: "  3 ", want: 3 * time.Second, wantOK: true},
		{name: "retry-after-ms wins", ra: "20", ms: "250", want: 250 * time.Millisecond, wantOK: true},
		{name: "fractional ms", ms: "12.5", want: 12500 * time.Microsecond, wantOK: true},
		{name: "malformed ms falls back to Retry-After", ra: "1", ms: "soon", want: time.Second, wantOK: true},
		{name: "HTTP-date", ra: "Mon, 30 Nov 2026 12:00:05 GMT", want: 5 * time.Second, wantOK: true},
		{name: "RFC 850 date", ra: "Monday, 30-Nov-26 12:00:07 GMT", want: 7 * time.Second, wantOK: true},
		{name: "asctime date", ra: "Mon Nov 30 12:00:09 2026", want: 9 * time.Second, wantOK: true},
		{name: "date in the past means now", ra: "Mon, 30 Nov 2026 11:00:00 GMT", want: 0, wantOK: true},
		{name: "absent", wantOK: false},
		{name: "negative", ra: "-5", wantOK: false},
		{name: "negative ms", ms: "-1", wantOK: false},
		{name: "garbage", ra: "soon", wantOK: false},
		{name: "exponent", ra: "1e3", wantOK: false},
		{name: "hex", ra: "0x10", wantOK: false},
		{name: "NaN", ra: "NaN", wantOK: false},
		{name: "Inf ms", ms: "Inf", wantOK: false},
		{name: "absurd seconds", ra: "99999999999", wantOK: false},
		{name: "absurd date", ra: "Fri, 31 Dec 9999 23:59:59 GMT", wantOK: false},
		{name: "too long", ra: "1000000000000000000000000000000000000000000000000000000000000000000000", wantOK: false},
		{name: "two values", ra: "1, 2", wantOK: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.ra != "" {
				h.Set("Retry-After", tc.ra)
			}
			if tc.ms != "" {
				h.Set("retry-after-ms", tc.ms)
			}
			got, ok := ParseRetryAfter(h, now)
			if ok != tc.wantOK || (ok && got != tc.want) {
				t.Fatalf("got (%v, %v), want (%v, %v)", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// FuzzParseRetryAfter: untrusted header values never panic and never yield
// a negative or absurd delay.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"2", "1.5", "0", "-1", "Mon, 30 Nov 2026 12:00:05 GMT", "1e9", "NaN", "", "९", "1_0", ".5", "5."} {
		f.Add(s, s)
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, ra, ms string) {
		h := http.Header{}
		h.Set("Retry-After", ra)
		h.Set("Retry-After-Ms", ms)
		d, ok := ParseRetryAfter(h, now)
		if !ok && d != 0 {
			t.Fatalf("not ok but delay %v", d)
		}
		if d < 0 || d > MaxHint {
			t.Fatalf("delay %v outside [0, %v] for %q / %q", d, MaxHint, ra, ms)
		}
	})
}
