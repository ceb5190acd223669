package retry

import (
	"crypto/sha256"
	"encoding/binary"
	"time"
)

// Backoff is the capped exponential wait before the k-th attempt on a route
// (k ≥ 2): min(base × 2^(k-2), max). The first retry waits base.
func Backoff(base, maxDelay time.Duration, k int) time.Duration {
	if k < 2 {
		return 0
	}
	d := base
	for i := 2; i < k; i++ {
		if d >= maxDelay || d > maxDelay/2 {
			return maxDelay
		}
		d *= 2
	}
	return min(d, maxDelay)
}

// Jittered applies the jitter mode to a backoff exp (docs/retries.md). With
// full jitter it samples a whole number of milliseconds uniformly in
// [0, exp] from a PRNG seeded by SHA-256(policy digest ‖ request id ‖
// ordinal), so a request replays to the same schedule; with none it waits
// exp. It returns the wait and the jitter to record, in milliseconds.
func Jittered(mode Jitter, exp time.Duration, policyDigest, requestID string, ordinal int) (time.Duration, int64) {
	if mode != JitterFull {
		return exp, exp.Milliseconds()
	}
	ms := SampleJitterMS(exp, policyDigest, requestID, ordinal)
	return time.Duration(ms) * time.Millisecond, ms
}

// SampleJitterMS is the full-jitter sample for the given seed inputs: an
// integer in [0, exp in whole milliseconds].
func SampleJitterMS(exp time.Duration, policyDigest, requestID string, ordinal int) int64 {
	span := exp.Milliseconds()
	if span <= 0 {
		return 0
	}
	h := sha256.New()
	h.Write([]byte(policyDigest))
	h.Write([]byte{0})
	h.Write([]byte(requestID))
	var ord [8]byte
	binary.BigEndian.PutUint64(ord[:], uint64(ordinal))
	h.Write(ord[:])
	sum := h.Sum(nil)
	// The modulo bias is below 2^-40 for any span a policy can express.
	return int64(binary.BigEndian.Uint64(sum[:8]) % uint64(span+1))
}

// JitterInterval is the closed interval, in milliseconds, that a recorded
// jitter must lie in for a wait whose backoff is exp.
func JitterInterval(mode Jitter, exp time.Duration) (lo, hi int64) {
	if mode != JitterFull {
		return exp.Milliseconds(), exp.Milliseconds()
	}
	return 0, exp.Milliseconds()
}
