package sqlite

import "math/bits"

// hashFilter is a set of 64-bit hashes that answers "maybe" or "no",
// never a wrong "no": a scalable Bloom filter, a series of Bloom filters
// each sized for twice the entries of the one before, the newest taking
// what is added. It holds the identities a LogStore's database may have
// (logknown.go) in a few bytes an entry, where a map of the hashes
// took 24–38: a gateway that keeps a day of requests at a thousand a
// second holds 86 million. A false "maybe" costs a read of the database,
// no more; with 14 bits and 10 probes an entry each filter answers one
// for about 0.12 % of absent hashes, a series of a dozen about 1.4 %, in
// 1.75 to 3.5 bytes an entry.
//
// It is not safe for concurrent use (its idShard's mu guards it).
type hashFilter struct {
	parts []bloomPart
	n     int // entries added
}

// bloomPart is one Bloom filter of the series.
type bloomPart struct {
	bits  []uint64
	n     int // entries added
	limit int // entries it is sized for
}

const (
	bloomBitsPerEntry = 14
	bloomProbes       = 10
	bloomFirst        = 1024 // entries the first filter is sized for
)

// newHashFilter returns an empty filter sized for about n entries.
func newHashFilter(n int) *hashFilter {
	f := &hashFilter{}
	f.grow(max(n, bloomFirst))
	return f
}

func (f *hashFilter) grow(limit int) {
	words := (limit*bloomBitsPerEntry + 63) / 64
	f.parts = append(f.parts, bloomPart{bits: make([]uint64, words), limit: limit})
}

// add puts h in the set.
func (f *hashFilter) add(h uint64) {
	p := &f.parts[len(f.parts)-1]
	if p.n >= p.limit {
		f.grow(2 * p.limit)
		p = &f.parts[len(f.parts)-1]
	}
	p.set(h)
	p.n++
	f.n++
}

// mayHave reports whether h may be in the set: false is certain.
func (f *hashFilter) mayHave(h uint64) bool {
	for i := len(f.parts) - 1; i >= 0; i-- {
		if f.parts[i].has(h) {
			return true
		}
	}
	return false
}

// len is how many entries were added (one added twice counts twice).
func (f *hashFilter) len() int { return f.n }

// probes calls fn with the bit index of each of h's probes in a filter
// of m bits: two halves of h combined (Kirsch and Mitzenmacher), the
// second made odd so that the probes differ.
func probes(h uint64, m uint64, fn func(i uint64) bool) bool {
	h1, h2 := h, bits.RotateLeft64(h, 32)|1
	for k := uint64(0); k < bloomProbes; k++ {
		if !fn((h1 + k*h2) % m) {
			return false
		}
	}
	return true
}

func (p *bloomPart) set(h uint64) {
	probes(h, uint64(len(p.bits))*64, func(i uint64) bool {
		p.bits[i/64] |= 1 << (i % 64)
		return true
	})
}

func (p *bloomPart) has(h uint64) bool {
	return probes(h, uint64(len(p.bits))*64, func(i uint64) bool { return p.bits[i/64]&(1<<(i%64)) != 0 })
}
