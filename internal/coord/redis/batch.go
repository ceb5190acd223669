package redis

import (
	"context"
	"errors"
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
}

// batchWait is how long the batcher lets writes gather after the first,
// and batchMax how many one pipeline takes.
const (
	batchWait = 500 * time.Microsecond
	batchMax  = 512
)

func newBatcher(c *Coordinator) *batcher {
	return &batcher{c: c, queue: make(chan func(goredis.Pipeliner), 16384)}
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
	for {
		select {
		case w := <-b.queue:
			writes = append(writes[:0], w)
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
		b.send(writes)
	}
}

// drain sends what is queued when the coordinator closes.
func (b *batcher) drain() {
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
