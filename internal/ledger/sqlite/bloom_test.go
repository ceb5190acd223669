package sqlite

import (
	"math/rand/v2"
	"testing"

	"pgregory.net/rapid"
)

// Every hash added is a "maybe", however the filter grew.
func TestHashFilterNeverForgets(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := newHashFilter(rapid.IntRange(0, 3000).Draw(t, "sized for"))
		added := rapid.SliceOf(rapid.Uint64()).Draw(t, "added")
		for _, h := range added {
			f.add(h)
		}
		for _, h := range added {
			if !f.mayHave(h) {
				t.Fatalf("%x was added and is not there", h)
			}
		}
		if f.len() != len(added) {
			t.Fatalf("len %d, added %d", f.len(), len(added))
		}
	})
}

// Grown from its first size to 200,000 entries, the filter still says
// "no" to nearly every hash never added, in a few bytes an entry.
func TestHashFilterFalseMaybesAreRare(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	f := newHashFilter(0)
	const n = 200_000
	for range n {
		f.add(rng.Uint64())
	}
	maybes := 0
	const asked = 100_000
	for range asked {
		if f.mayHave(rng.Uint64()) {
			maybes++
		}
	}
	// Each of its filters answers about 0.12 % of the absent: the eight
	// together, about 1 %.
	if rate := float64(maybes) / asked; rate > 0.02 {
		t.Fatalf("%.2f %% of absent hashes are a maybe", 100*rate)
	}
	bytes := 0
	for _, p := range f.parts {
		bytes += 8 * len(p.bits)
	}
	if per := float64(bytes) / n; per > 4 {
		t.Fatalf("%.1f bytes an entry", per)
	}
	t.Logf("%d filters, %.2f bytes an entry, %.3f %% false maybes", len(f.parts), float64(bytes)/n, 100*float64(maybes)/asked)
}
