package retry

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxHint is the largest Retry-After the engine believes. A larger hint is
// absurd (a misconfigured or hostile upstream) and is ignored rather than
// capped, as is anything malformed or negative.
const MaxHint = 7 * 24 * time.Hour

// maxHeaderLen bounds how much of a header value is even looked at.
const maxHeaderLen = 64

// ParseRetryAfter reads a provider's delay hint from the response headers
// (docs/retries.md): retry-after-ms (milliseconds, as OpenAI sends it) wins over
// Retry-After, which may be delta-seconds or an HTTP-date (RFC 9110 §10.2.3)
// relative to now. Malformed, negative, non-finite or absurd values are
// ignored: ok is false and no error is ever returned. Capping to the
// policy's retry_after_cap is the engine's job.
func ParseRetryAfter(h http.Header, now time.Time) (d time.Duration, ok bool) {
	if d, ok := parseMillis(h.Get("Retry-After-Ms")); ok {
		return d, true
	}
	return ParseRetryAfterValue(h.Get("Retry-After"), now)
}

// ParseRetryAfterValue reads one Retry-After header value.
func ParseRetryAfterValue(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > maxHeaderLen {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil || !finite(secs) || secs < 0 || secs > MaxHint.Seconds() || strings.ContainsAny(v, "eE_xXpP") {
			return 0, false
		}
		return time.Duration(secs * float64(time.Second)), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d < 0 {
		return 0, true // a date in the past means "now"
	}
	if d > MaxHint {
		return 0, false
	}
	return d, true
}

// ParseRetryDelay reads a delay hint a provider gave in its error body:
// Google's google.rpc.RetryInfo.retryDelay, a google.protobuf.Duration in
// its JSON form — decimal seconds with at most nine fractional digits and
// an "s" ("20s", "1.5s", "0.020s"). It is untrusted like Retry-After and
// read as strictly: a sign, a space, an exponent, another unit, more than
// nine fractional digits, or an absurd value (over MaxHint) is ignored —
// ok is false, and nothing panics. Capping to retry_after_cap is the
// engine's job.
func ParseRetryDelay(v string) (time.Duration, bool) {
	if len(v) < 2 || len(v) > maxHeaderLen || v[len(v)-1] != 's' {
		return 0, false
	}
	whole, frac, dotted := strings.Cut(v[:len(v)-1], ".")
	if !digits(whole) || dotted && (len(frac) > 9 || !digits(frac)) {
		return 0, false
	}
	secs, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || secs > int64(MaxHint/time.Second) {
		return 0, false
	}
	d := time.Duration(secs) * time.Second
	if dotted {
		nanos, _ := strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
		d += time.Duration(nanos)
	}
	if d > MaxHint {
		return 0, false
	}
	return d, true
}

// digits reports whether s is one or more ASCII digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func parseMillis(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > maxHeaderLen || v[0] < '0' || v[0] > '9' || strings.ContainsAny(v, "eE_xXpP") {
		return 0, false
	}
	ms, err := strconv.ParseFloat(v, 64)
	if err != nil || !finite(ms) || ms < 0 || ms > float64(MaxHint.Milliseconds()) {
		return 0, false
	}
	return time.Duration(ms * float64(time.Millisecond)), true
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
