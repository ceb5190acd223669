package retry

import (
	"net/http"
	"strconv"
	"strings"
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

// Google's RetryInfo.retryDelay counts like Retry-After: a Duration's JSON
// form read strictly, anything else ignored.
func TestParseRetryDelay(t *testing.T) {
	for _, tc := range []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"20s", 20 * time.Second, true},
		{"2s", 2 * time.Second, true},
		{"0s", 0, true},
		{"1.5s", 1500 * time.Millisecond, true},
		{"0.020s", 20 * time.Millisecond, true},
		{"39.108725145s", 39*time.Second + 108725145*time.Nanosecond, true},
		{"604800s", MaxHint, true},
		{"604800.000000001s", 0, false},
		{"604801s", 0, false},
		{"99999999999999999999s", 0, false},
		{"", 0, false},
		{"s", 0, false},
		{"20", 0, false},
		{"20ms", 0, false},
		{"-1s", 0, false},
		{"+1s", 0, false},
		{" 1s", 0, false},
		{"1s ", 0, false},
		{"1.s", 0, false},
		{".5s", 0, false},
		{"1.0000000001s", 0, false},
		{"1e3s", 0, false},
		{"0x10s", 0, false},
		{"NaNs", 0, false},
		{"１s", 0, false},
		{"1,5s", 0, false},
	} {
		got, ok := ParseRetryDelay(tc.in)
		if ok != tc.wantOK || got != tc.want {
			t.Errorf("ParseRetryDelay(%q) = (%v, %v), want (%v, %v)", tc.in, got, ok, tc.want, tc.wantOK)
		}
	}
}

// FuzzParseRetryDelay: an untrusted RetryInfo delay never panics and
// never yields a negative or absurd delay; what it accepts is exactly a
// Duration's JSON form, which formats back to the same number.
func FuzzParseRetryDelay(f *testing.F) {
	for _, s := range []string{"20s", "1.5s", "0s", "0.020s", "39.108725145s", "-1s", "1e3s", "20", "s", ".5s", "604801s", "९s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := ParseRetryDelay(v)
		if !ok {
			if d != 0 {
				t.Fatalf("%q: not ok but delay %v", v, d)
			}
			return
		}
		if d < 0 || d > MaxHint {
			t.Fatalf("%q: delay %v outside [0, %v]", v, d, MaxHint)
		}
		whole, frac, _ := strings.Cut(strings.TrimSuffix(v, "s"), ".")
		secs, err := strconv.ParseInt(whole, 10, 64)
		if err != nil || time.Duration(secs)*time.Second > d || d-time.Duration(secs)*time.Second >= time.Second || len(frac) > 9 {
			t.Fatalf("%q read as %v", v, d)
		}
	})
}
