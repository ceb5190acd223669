package breaker

import "time"

// buckets is how many slices a rolling window is cut into: counts age out
// one slice (a tenth of the window) at a time.
const buckets = 10

// rolling counts two quantities over a sliding window of time, in buckets.
// It is not safe for concurrent use; its owner holds a lock.
type rolling struct {
	width int64 // nanoseconds per bucket
	b     [buckets]bucket
}

type bucket struct {
	slot int64 // which width-long slice of time the counts belong to
	n    [2]int64
}

func newRolling(window time.Duration) rolling {
	w := int64(window) / buckets
	if w <= 0 {
		w = 1
	}
	return rolling{width: w}
}

// add counts d into quantity i at now.
func (r *rolling) add(now time.Time, i int, d int64) {
	slot := now.UnixNano() / r.width
	b := &r.b[mod(slot)]
	if b.slot != slot {
		*b = bucket{slot: slot}
	}
	b.n[i] += d
}

// sum returns both quantities over the window ending at now.
func (r *rolling) sum(now time.Time) (a, b int64) {
	slot := now.UnixNano() / r.width
	for i := range r.b {
		bk := &r.b[i]
		if bk.slot <= slot && slot-bk.slot < buckets {
			a += bk.n[0]
			b += bk.n[1]
		}
	}
	return a, b
}

func (r *rolling) reset() { r.b = [buckets]bucket{} }

func mod(slot int64) int {
	m := slot % buckets
	if m < 0 {
		m += buckets
	}
	return int(m)
}
