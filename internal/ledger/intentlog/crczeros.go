package intentlog

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
)

// Finding the next intact frame after damaged bytes tries every offset as
// a frame, and a frame's length may reach megabytes ahead — into the zeros
// a file is extended with, or across garbage: checksumming each candidate
// afresh costs the square of the bytes searched (seconds for a torn frame
// of a few kilobytes before 16 MiB of zeros, hours for megabytes of
// garbage). But a CRC register is a linear function of what it has read:
// reading n more bytes maps a register r to A^n·r ⊕ raw(bytes), where A
// is the map of one zero byte and raw the register the bytes leave from
// zero. So with raw(b[base:i]) known at every 256th offset (finder.at),
// any candidate's checksum comes from two of them, a few hundred bytes
// read, and two applications of A^n, each at most 32 table lookups of a
// precomputed A^(2^k) (zlib's crc32_combine uses the same algebra); and
// zeros past the last non-zero byte cost only A^n.

// shiftTables[k] applies A^(2^k) to a raw register, a byte of it at a
// time.
var shiftTables = func() (t [32][4][256]uint32) {
	var m [32][32]uint32 // m[k][i]: A^(2^k) of bit i
	for i := range 32 {
		r := uint32(1) << i
		m[0][i] = castagnoli[byte(r)] ^ r>>8 // one zero byte, as crc32's table-driven update reads it
	}
	apply := func(k int, v uint32) (out uint32) {
		for i := 0; v != 0; i, v = i+1, v>>1 {
			if v&1 != 0 {
				out ^= m[k][i]
			}
		}
		return out
	}
	for k := 1; k < 32; k++ {
		for i := range 32 {
			m[k][i] = apply(k-1, m[k-1][i])
		}
	}
	for k := range 32 {
		for j := range 4 {
			for v := range 256 {
				t[k][j][v] = apply(k, uint32(v)<<(8*j))
			}
		}
	}
	return t
}()

// shift is A^n·r: the raw register r after n zero bytes.
func shift(r uint32, n int) uint32 {
	for k := 0; n != 0; k, n = k+1, n>>1 {
		if n&1 != 0 {
			t := &shiftTables[k]
			r = t[0][byte(r)] ^ t[1][byte(r>>8)] ^ t[2][byte(r>>16)] ^ t[3][byte(r>>24)]
		}
	}
	return r
}

// raw is the raw register r after reading b (crc32.Update inverts the
// register it is given and the one it returns).
func raw(r uint32, b []byte) uint32 { return ^crc32.Update(^r, castagnoli, b) }

// finderStride is how far apart finder keeps registers.
const finderStride = 256

// finder tells whether intact frames start at offsets of b from base on:
// what nextFrame asks of every offset after damaged bytes.
type finder struct {
	b    []byte
	z    int      // b's bytes from z on are zeros
	base int      // where at's registers start
	at   []uint32 // at[k]: raw(0, b[base : base+k*finderStride])
}

// newFinder is a finder of frames at base and after in b, whose bytes
// from z on are zeros (zerosFrom).
func newFinder(b []byte, base, z int) *finder {
	return &finder{b: b, z: max(z, base), base: base, at: []uint32{0}}
}

// prefix is raw(0, b[f.base:i]), for any i ≥ f.base (zeros past the end
// of b, as past f.z, only shift it).
func (f *finder) prefix(i int) uint32 {
	if i > f.z {
		return shift(f.prefix(f.z), i-f.z)
	}
	k := (i - f.base) / finderStride
	for len(f.at) <= k {
		j := len(f.at) - 1
		from := f.base + j*finderStride
		f.at = append(f.at, raw(f.at[j], f.b[from:from+finderStride]))
	}
	from := f.base + k*finderStride
	return raw(f.at[k], f.b[from:i])
}

// intact reports whether an intact frame starts at p (p ≥ f.base).
func (f *finder) intact(p int) bool {
	b := f.b
	if len(b)-p <= headerSize {
		return false
	}
	size := int(binary.LittleEndian.Uint32(b[p:]))
	if size == 0 || size > MaxRecord || size > len(b)-p-headerSize {
		return false
	}
	start, end := p+headerSize, p+headerSize+size
	var r uint32
	if end <= f.z && size <= 2*finderStride {
		r = raw(^crc32.Checksum(b[p:p+4], castagnoli), b[start:end])
	} else {
		// raw(c, rec) = A^size·c ⊕ raw(0, rec), and
		// raw(0, rec) = prefix(end) ⊕ A^size·prefix(start).
		r = shift(^crc32.Checksum(b[p:p+4], castagnoli)^f.prefix(start), size) ^ f.prefix(end)
	}
	return ^r == binary.LittleEndian.Uint32(b[p+4:])
}

// zerosFrom is where b's trailing run of zeros starts (len(b): there is
// none).
func zerosFrom(b []byte) int {
	z := len(b)
	for z > 0 {
		n := min(z, len(zeros))
		if !bytes.Equal(b[z-n:z], zeros[:n]) {
			break
		}
		z -= n
	}
	for z > 0 && b[z-1] == 0 {
		z--
	}
	return z
}
