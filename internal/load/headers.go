package load

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// rateHeaders are the rate-limit headers providers send: for each
// dimension, the remaining count, the limit, and when it resets.
var rateHeaders = []struct{ remaining, limit, reset string }{
	// OpenAI (and Azure OpenAI): resets are durations ("6m0s", "1s", "20ms").
	{"x-ratelimit-remaining-requests", "x-ratelimit-limit-requests", "x-ratelimit-reset-requests"},
	{"x-ratelimit-remaining-tokens", "x-ratelimit-limit-tokens", "x-ratelimit-reset-tokens"},
	// Anthropic: resets are RFC 3339 times.
	{"anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-reset"},
	{"anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-limit", "anthropic-ratelimit-tokens-reset"},
	{"anthropic-ratelimit-input-tokens-remaining", "anthropic-ratelimit-input-tokens-limit", "anthropic-ratelimit-input-tokens-reset"},
	{"anthropic-ratelimit-output-tokens-remaining", "anthropic-ratelimit-output-tokens-limit", "anthropic-ratelimit-output-tokens-reset"},
}

// The keys of rateHeaders as net/http stores them, so that each is one
// map lookup (Header.Get canonicalises its key on every call: six
// dimensions cost more than the rest of reading an answer's headers).
func init() {
	for i := range rateHeaders {
		d := &rateHeaders[i]
		d.remaining, d.limit, d.reset = http.CanonicalHeaderKey(d.remaining), http.CanonicalHeaderKey(d.limit), http.CanonicalHeaderKey(d.reset)
	}
}

// first is a header's first value by its canonical key.
func first(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// maxReset bounds how long a learned headroom is believed: a provider's
// reset past it is taken as this (a header is untrusted input).
const maxReset = time.Hour

// defaultReset is how long a headroom without a reset header is believed.
const defaultReset = time.Minute

// ParseHeaders reads a provider's rate-limit headers, untrusted: the
// least share left over the dimensions it reports (remaining ÷ limit, 0
// to 1), and until when that holds — the latest of their resets, at most
// an hour. ok is false when no dimension is readable. Malformed values
// are ignored, never an error.
func ParseHeaders(h http.Header, now time.Time) (left float64, until time.Time, ok bool) {
	left = 1
	for _, d := range rateHeaders {
		r := first(h, d.remaining)
		if r == "" {
			continue
		}
		rem, errR := strconv.ParseFloat(strings.TrimSpace(r), 64)
		lim, errL := strconv.ParseFloat(strings.TrimSpace(first(h, d.limit)), 64)
		if errR != nil || errL != nil || lim <= 0 || rem < 0 || math.IsNaN(rem) || math.IsInf(rem, 0) || math.IsInf(lim, 0) {
			continue
		}
		ok = true
		left = min(left, min(1, rem/lim))
		until = later(until, resetAt(first(h, d.reset), now))
	}
	if !ok {
		return 0, time.Time{}, false
	}
	if until.IsZero() {
		until = now.Add(defaultReset)
	}
	return left, until, true
}

// resetAt reads a reset header: a duration from now (OpenAI), or a time
// (Anthropic); zero when unreadable.
func resetAt(v string, now time.Time) time.Time {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(min(d, maxReset))
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		if t.Before(now) {
			return time.Time{}
		}
		return now.Add(min(t.Sub(now), maxReset))
	}
	return time.Time{}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
