package redis

import (
	"context"
	"errors"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// batcher sends the writes nobody waits for — claim releases, settled
// costs, breaker and budget counts, stream copies of a flight's output —
// in pipelines: one round trip for whatever queued meanwhile, from every
// request, instead of one each.
type batcher struct {
	c     *Coordinator
	queue chan func(goredis.Pipeliner)
	// lazy are writes that may wait for the next pipeline (or lazyWait):
	// a request's settled cost goes with its claim's release a moment
	// later instead of in a round trip of its own.
	mu   sync.Mutex
	lazy []func(goredis.Pipeliner)
	kick chan struct{}
}

// batchWait is how long the batcher lets writes gather after the first,
// and batchMax how many one pipeline takes.
const (
	batchWait = 500 * time.Microsecond
	batchMax  = 512
	lazyWait  = 20 * time.Millisecond
)

func newBatcher(c *Coordinator) *batcher {
	return &batcher{c: c, queue: make(chan func(goredis.Pipeliner), 16384), kick: make(chan struct{}, 1)}
}

// later queues a write that may wait for the next pipeline, lazyWait at
// the most. Until it is sent, what it would release still counts, so it
// may only be a write whose delay errs on the safe side.
func (b *batcher) later(w func(goredis.Pipeliner)) {
	b.mu.Lock()
	b.lazy = append(b.lazy, w)
	first := len(b.lazy) == 1
	b.mu.Unlock()
	if first {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
}

// takeLazy returns the lazy writes and forgets them.
func (b *batcher) takeLazy() []func(goredis.Pipeliner) {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.lazy
	b.lazy = nil
	return w
}

// add queues a write. If the queue is full (Redis is down and writes pile
// up) the write is dropped and reported: the batcher must never block a
// request.
func (b *batcher) add(w func(goredis.Pipeliner)) {
	select {
	case b.queue <- w:
	default:
		b.c.log.Warn("coordination: dropped a background write, the queue is full")
	}
}

func (b *batcher) run() {
	defer b.c.wg.Done()
	var writes []func(goredis.Pipeliner)
	lazy := time.NewTimer(time.Hour)
	lazy.Stop()
	for {
		select {
		case w := <-b.queue:
			writes = append(writes[:0], w)
		case <-b.kick:
			lazy.Reset(lazyWait)
			continue
		case <-lazy.C:
			if w := b.takeLazy(); len(w) > 0 {
				b.send(w)
			}
			continue
		case <-b.c.stop:
			b.drain()
			return
		}
		t := time.NewTimer(batchWait)
	gather:
		for len(writes) < batchMax {
			select {
			case w := <-b.queue:
				writes = append(writes, w)
			case <-t.C:
				break gather
			}
		}
		t.Stop()
		b.send(append(b.takeLazy(), writes...))
	}
}

// drain sends what is queued when the coordinator closes.
func (b *batcher) drain() {
	if w := b.takeLazy(); len(w) > 0 {
		b.send(w)
	}
	for {
		var writes []func(goredis.Pipeliner)
		for len(writes) < batchMax {
			select {
			case w := <-b.queue:
				writes = append(writes, w)
				continue
			default:
			}
			break
		}
		if len(writes) == 0 {
			return
		}
		b.send(writes)
	}
}

func (b *batcher) send(writes []func(goredis.Pipeliner)) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pipe := b.c.rdb.Pipeline()
	for _, w := range writes {
		w(pipe)
	}
	_, err := pipe.Exec(ctx)
	if errors.Is(err, goredis.Nil) {
		err = nil
	}
	if b.c.check(err) != nil && !isReply(err) {
		b.c.log.Warn("coordination: background writes lost", "count", len(writes), "err", err)
	}
}
