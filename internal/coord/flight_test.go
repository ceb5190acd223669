package coord

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestJoinersReadEverythingFromTheStart(t *testing.T) {
	l := NewLocal(1 << 20)
	f, owner, _, err := l.Acquire("k:a", "sha", "r1", time.Now().Add(time.Minute))
	if err != nil || !owner {
		t.Fatal(owner, err)
	}
	f.SetHead(&Head{Status: 200})
	f.Write([]byte("one "))
	j, owner2, _, err := l.Acquire("k:a", "sha", "r2", time.Now())
	if err != nil || owner2 || j != f || f.Joined() != 1 {
		t.Fatalf("join: %v %v %v", owner2, err, f.Joined())
	}
	if _, _, _, err := l.Acquire("k:a", "other", "r3", time.Now()); !errors.Is(err, ErrConflict) {
		t.Fatalf("conflict: %v", err)
	}
	var wg sync.WaitGroup
	got := make([]string, 2)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rd := f.NewReader()
			if h, err := rd.Head(context.Background()); err != nil || h.Status != 200 {
				t.Error("no head")
			}
			var b bytes.Buffer
			for {
				chunk, done, err := rd.Next(context.Background())
				if err != nil || done {
					break
				}
				b.Write(chunk)
			}
			got[i] = b.String()
		}()
	}
	f.Write([]byte("two "))
	f.Finish(nil, []byte("three"))
	wg.Wait()
	for _, g := range got {
		if g != "one two three" {
			t.Fatalf("read %q", g)
		}
	}
	if l.Len() != 0 {
		t.Fatal("a finished flight stayed in the table")
	}
}

func TestLastSubscriberCancelsAfterTheGrace(t *testing.T) {
	l := NewLocal(1 << 20)
	f, _, ctx, _ := l.Acquire("k:b", "sha", "r", time.Now())
	f.SetGrace(50 * time.Millisecond)
	f.Leave()
	if ctx.Err() != nil {
		t.Fatal("cancelled before the grace")
	}
	g, owner, _, _ := l.Acquire("k:b", "sha", "r2", time.Now()) // a rejoin within the grace
	if owner || g != f {
		t.Fatal("the rejoin did not join")
	}
	time.Sleep(100 * time.Millisecond)
	if ctx.Err() != nil {
		t.Fatal("a rejoined flight was cancelled")
	}
	g.Leave()
	time.Sleep(100 * time.Millisecond)
	if ctx.Err() == nil {
		t.Fatal("no subscriber left, yet the work goes on")
	}
	h, _, hctx, _ := l.Acquire("k:c", "sha", "r", time.Now())
	h.Leave() // no grace: at once
	if hctx.Err() == nil {
		t.Fatal("not cancelled at once")
	}
}

func TestJoinBufferBound(t *testing.T) {
	l := NewLocal(10)
	f, _, _, _ := l.Acquire("k:t", "sha", "r", time.Now())
	f.Write([]byte("0123456789ab"))
	if _, _, _, err := l.Acquire("k:t", "sha", "r2", time.Now()); !errors.Is(err, ErrTruncated) {
		t.Fatalf("joining past the bound: %v", err)
	}
}

// BenchmarkFanout1000 relays 100 chunks of one stream to 1,000 joiners and
// reports the time for a chunk to reach every joiner and memory per joiner.
func BenchmarkFanout1000(b *testing.B) {
	const joiners, chunks = 1000, 100
	chunk := bytes.Repeat([]byte("x"), 120) // about one SSE chunk
	for b.Loop() {
		l := NewLocal(8 << 20)
		f, _, _, _ := l.Acquire("k:f", "sha", "r", time.Now())
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		var wg sync.WaitGroup
		var ready sync.WaitGroup
		got := make(chan struct{}, joiners)
		for i := 0; i < joiners; i++ {
			g, _, _, _ := l.Acquire("k:f", "sha", "r", time.Now())
			wg.Add(1)
			ready.Add(1)
			go func() {
				defer wg.Done()
				rd := g.NewReader()
				ready.Done()
				seen := 0
				for {
					c, done, err := rd.Next(context.Background())
					if err != nil || done {
						return
					}
					seen += len(c)
					if seen >= len(chunk) {
						got <- struct{}{}
						seen -= len(chunk)
					}
				}
			}()
		}
		ready.Wait()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/joiners, "heap-B/joiner")
		var total time.Duration
		for c := 0; c < chunks; c++ {
			start := time.Now()
			f.Write(chunk)
			for i := 0; i < joiners; i++ {
				<-got
			}
			total += time.Since(start)
		}
		f.Finish(nil, nil)
		wg.Wait()
		b.ReportMetric(float64(total.Microseconds())/chunks, "µs/chunk-to-all")
	}
}

// A subscriber that has read a finished flight's end never finds it still
// in the table: its client's next request goes to the ledger (a replay),
// not into the flight that just ended (a join).
func TestAFinishedFlightIsGoneBeforeItsEndIsRead(t *testing.T) {
	l := NewLocal(1 << 20)
	for i := range 2000 {
		f, _, _, err := l.Acquire("k:a", "sha", "r", time.Now().Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		read := make(chan int)
		go func() {
			rd := f.NewReader()
			for {
				if _, done, _ := rd.Next(context.Background()); done {
					read <- l.Len()
					return
				}
			}
		}()
		f.Finish(&Head{Status: 200}, []byte("answer"))
		if n := <-read; n != 0 {
			t.Fatalf("iteration %d: the end was read while the flight was still in the table", i)
		}
		f.Leave()
	}
}

// The end of a stream is staged for the ledger before it is published:
// no reader sees it until Finish, and Finish publishes the very bytes
// that were staged, which stay as they were for whoever holds them.
func TestStagedEndIsPublishedByFinish(t *testing.T) {
	l := NewLocal(1 << 20)
	f, _, _, err := l.Acquire("k:s", "sha", "r1", time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	f.SetHead(&Head{Status: 200})
	f.Write(bytes.Repeat([]byte("a"), 700)) // past the first capacity
	rd := f.NewReader()
	first, _, err := rd.Next(context.Background())
	if err != nil || len(first) != 700 {
		t.Fatalf("first read: %d bytes, %v", len(first), err)
	}
	stored := f.Stage([]byte("end"))
	if want := strings.Repeat("a", 700) + "end"; string(stored) != want {
		t.Fatalf("staged output %q", stored)
	}
	if out, _ := f.Output(); len(out) != 700 {
		t.Fatalf("staged bytes were published: %d", len(out))
	}
	kept := string(stored)
	f.Finish(nil, []byte("end"))
	rest, done, err := rd.Next(context.Background())
	if err != nil || done || string(rest) != "end" {
		t.Fatalf("after finish: %q %v %v", rest, done, err)
	}
	if _, done, _ := rd.Next(context.Background()); !done {
		t.Fatal("not done after the end")
	}
	if string(stored) != kept || string(first) != strings.Repeat("a", 700) {
		t.Fatal("bytes a holder was given changed")
	}
}

// What was staged is dropped when the flight ends otherwise.
func TestStagedEndIsReplacedByAnotherEnd(t *testing.T) {
	l := NewLocal(1 << 20)
	f, _, _, err := l.Acquire("k:s", "sha", "r1", time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	f.SetHead(&Head{Status: 200})
	f.Write([]byte("one "))
	f.Stage([]byte("staged end"))
	f.Abandon(nil, []byte("error"))
	if out, _ := f.Output(); string(out) != "one error" {
		t.Fatalf("output %q", out)
	}
}

// A stream the size of the ones before it fills one array: its output
// starts with room for what they came to, and is never copied to grow.
func TestAStreamLikeTheLastFillsOneArray(t *testing.T) {
	l := NewLocal(1 << 20)
	chunk := bytes.Repeat([]byte("x"), 300)
	stream := func(id string) (grew int) {
		f, _, _, err := l.Acquire(id, "sha", id, time.Now().Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		f.SetHead(&Head{Status: 200})
		last := -1
		for range 40 {
			f.Write(chunk)
			out, _ := f.Output()
			if last >= 0 && cap(out) != last {
				grew++
			}
			last = cap(out)
		}
		f.Finish(nil, []byte("end"))
		return grew
	}
	if grew := stream("k:first"); grew == 0 {
		t.Fatal("the first stream, with nothing to go by, never grew: the test measures nothing")
	}
	for i := range 3 {
		if grew := stream("k:" + strconv.Itoa(i)); grew != 0 {
			t.Fatalf("stream %d like the first grew its output %d times", i, grew)
		}
	}
}

// A reader waiting for output is woken by the write it waits for, though
// a flight makes its channel only when someone waits.
func TestAWaitingReaderIsWoken(t *testing.T) {
	l := NewLocal(1 << 20)
	f, _, _, _ := l.Acquire("k:w", "sha", "r", time.Now().Add(time.Minute))
	rd := f.NewReader()
	got := make(chan string)
	go func() {
		h, err := rd.Head(context.Background())
		if err != nil || h.Status != 200 {
			got <- "head: " + err.Error()
			return
		}
		var all []byte
		for {
			b, done, err := rd.Next(context.Background())
			if err != nil {
				got <- err.Error()
				return
			}
			if done {
				got <- string(all)
				return
			}
			all = append(all, b...)
		}
	}()
	f.SetHead(&Head{Status: 200})
	f.Write([]byte("one "))
	f.Write([]byte("two "))
	f.Finish(nil, []byte("end"))
	if s := <-got; s != "one two end" {
		t.Fatalf("the reader read %q", s)
	}
}

// StagePrefixed writes its prefix in the room before the output: one
// slice of prefix, output and end, and Finish publishes the output and
// that end, without the prefix.
func TestStagePrefixedPutsAHeaderBeforeTheOutput(t *testing.T) {
	l := NewLocal(1 << 20)
	f, _, _, _ := l.Acquire("k:p", "sha", "r", time.Now().Add(time.Minute))
	if enc := f.StagePrefixed(nil, []byte("H")); enc != nil {
		t.Fatalf("nothing to stage, yet %q", enc)
	}
	f.SetHead(&Head{Status: 200})
	f.Write([]byte("data: 1\n\n"))
	if enc := f.StagePrefixed([]byte("end"), bytes.Repeat([]byte("h"), prefixRoom+1)); enc != nil {
		t.Fatalf("a prefix past the room, yet %q", enc)
	}
	enc := f.StagePrefixed([]byte("end"), []byte("HEADER"))
	if string(enc) != "HEADERdata: 1\n\nend" {
		t.Fatalf("staged %q", enc)
	}
	rd := f.NewReader()
	f.Finish(nil, []byte("end"))
	var all []byte
	for {
		b, done, err := rd.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if done {
			break
		}
		all = append(all, b...)
	}
	if string(all) != "data: 1\n\nend" {
		t.Fatalf("published %q", all)
	}
	if out, _ := f.Output(); &out[0] != &enc[len("HEADER")] {
		t.Fatal("the published output is a copy of the staged one")
	}
}
