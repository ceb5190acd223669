package intentlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// FuzzScan: whatever follows the magic, Scan neither panics nor reads
// past the file; every record it hands over is the intact frame at the
// offset it gives, in file order; damaged bytes end where the next record
// it hands over starts; and Open agrees — it refuses exactly the files
// with corruption and leaves them as they were, and cuts the others to
// the end of their last intact frame, after which an append reads back.
func FuzzScan(f *testing.F) {
	two := AppendFrame(AppendFrame(nil, []byte("1:one")), []byte("2:two"))
	f.Add(two)
	f.Add(append(bytes.Clone(two), make([]byte, 64)...))
	f.Add(append(bytes.Clone(two[:9]), two...))
	f.Add(append(make([]byte, 16), two...))
	flipped := bytes.Clone(two)
	flipped[10] ^= 0x20
	f.Add(flipped)
	f.Add(AppendFrame(AppendFrame(nil, []byte("2:b")), []byte("1:a")))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, body []byte) {
		b := append(bytes.Clone(magic), body...)
		type got struct {
			rec string
			off int64
		}
		var recs []got
		sc, err := scanBytes(b, "fuzz.log", ScanOptions{Seq: numbered}, func(rec []byte, off int64) error {
			recs = append(recs, got{string(rec), off})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if sc.End > sc.Size || sc.Size != int64(len(b)) || sc.Records != len(recs) {
			t.Fatalf("end %d, size %d of %d bytes, %d records of %d", sc.End, sc.Size, len(b), sc.Records, len(recs))
		}
		prevEnd := int64(len(magic))
		for _, r := range recs {
			rec, n, err := ReadFrame(b[r.off:])
			if err != nil || string(rec) != r.rec || r.off < prevEnd {
				t.Fatalf("record %q at %d (after %d) is not the frame there: %v", r.rec, r.off, prevEnd, err)
			}
			prevEnd = r.off + int64(n)
		}
		if len(recs) > 0 && sc.End < prevEnd {
			t.Fatalf("end %d before the last record's end %d", sc.End, prevEnd)
		}
		damaged := false
		for _, p := range sc.Problems {
			if p.Kind != Damaged {
				continue
			}
			damaged = true
			if _, _, err := ReadFrame(b[p.Offset+p.Length:]); p.Length <= 0 || err != nil {
				t.Fatalf("damage %v does not end at an intact frame", p)
			}
		}
		// Open sees the same bytes; it checks no numbers.
		path := filepath.Join(dir, "fuzz.log")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		l, rc, err := Open(path, Options{Preallocate: -1}, func([]byte) error { return nil })
		if damaged {
			if err == nil {
				_ = l.Close()
			}
			after, rerr := os.ReadFile(path)
			if !errors.Is(err, ErrCorruptLog) || rerr != nil || !bytes.Equal(after, b) {
				t.Fatalf("open of a damaged log: %v; file unchanged: %v", err, bytes.Equal(after, b))
			}
			return
		}
		if err != nil {
			t.Fatalf("open: %v (scan found %v)", err, sc.Problems)
		}
		if rc.Size != sc.End || rc.Records != len(recs)+countUnreadable(sc) {
			t.Fatalf("open kept %+v; scan %+v", rc, sc)
		}
		if err := l.Append([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		n := 0
		last := ""
		again, err := Scan(path, ScanOptions{}, func(rec []byte, _ int64) error { n++; last = string(rec); return nil })
		if err != nil || again.Err() != nil || again.Tail != nil || n != rc.Records+1 || last != "x" {
			t.Fatalf("after the cut and an append: %v %+v, %d records, last %q", err, again, n, last)
		}
	})
}

// countUnreadable counts the intact records Scan did not hand over
// because their number was out of order or missing: Open, which checks
// no numbers, reads them.
func countUnreadable(sc *Scanned) int {
	n := 0
	for _, p := range sc.Problems {
		if p.Kind == OutOfOrder || p.Kind == Unnumbered {
			n++
		}
	}
	return n
}

// A finder's checksum of a candidate frame — from registers kept every
// few hundred bytes, shifted over the bytes between — is the checksum
// crc32 computes over the frame, wherever the frame starts and ends
// relative to them and to the trailing zeros.
func TestFinderChecksumsAsCRC32Does(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	b := make([]byte, 5000)
	for i := range b[:3000] {
		b[i] = byte(rng.IntN(256))
	}
	for _, n := range []int{1, 2, 100, 511, 512, 513, 1000, 2000, 4990} {
		for _, base := range []int{0, 1, 300} {
			for _, p := range []int{base, base + 1, base + 255, base + 256, 2990, 3000, 3100} {
				if p+headerSize+n > len(b) {
					continue
				}
				c := bytes.Clone(b)
				binary.LittleEndian.PutUint32(c[p:], uint32(n))
				crc := crc32.Update(crc32.Checksum(c[p:p+4], castagnoli), castagnoli, c[p+headerSize:p+headerSize+n])
				binary.LittleEndian.PutUint32(c[p+4:], crc)
				f := newFinder(c, base, zerosFrom(c))
				if !f.intact(p) {
					t.Fatalf("a frame of %d at %d (base %d, zeros from %d) is not found intact", n, p, base, f.z)
				}
				binary.LittleEndian.PutUint32(c[p+4:], crc^1)
				if newFinder(c, base, zerosFrom(c)).intact(p) {
					t.Fatalf("a frame of %d at %d with a wrong checksum is found intact", n, p)
				}
			}
		}
	}
}
