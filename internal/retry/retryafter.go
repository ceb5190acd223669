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
