package redis

import (
	"context"
	"errors"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// hub reads the streams of every remote flight this gateway's clients
// joined with one blocking XREAD over all of them: one connection for all
// joiners however many, instead of one each, and an entry reaches its
// reader as soon as the owner's batcher wrote it.
type hub struct {
	c       *Coordinator
	mu      sync.Mutex
	readers map[string]*remote // by stream key
	wake    chan struct{}
}

// hubBlock is how long one XREAD waits for entries: also how late a
// reader added meanwhile is first read.
const hubBlock = 20 * time.Millisecond

func newHub(c *Coordinator) *hub {
	return &hub{c: c, readers: map[string]*remote{}, wake: make(chan struct{}, 1)}
}

func (h *hub) add(r *remote) {
	h.mu.Lock()
	h.readers[r.key] = r
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

func (h *hub) remove(r *remote) {
	h.mu.Lock()
	if h.readers[r.key] == r {
		delete(h.readers, r.key)
	}
	h.mu.Unlock()
}

func (h *hub) run() {
	defer h.c.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-h.c.stop; cancel() }()
	for ctx.Err() == nil {
		h.mu.Lock()
		n := len(h.readers)
		streams := make([]string, 0, 2*n)
		for k := range h.readers {
			streams = append(streams, k)
		}
		for _, k := range streams[:n] {
			streams = append(streams, h.readers[k].last)
		}
		h.mu.Unlock()
		if n == 0 {
			select {
			case <-h.wake:
			case <-ctx.Done():
			}
			continue
		}
		res, err := h.c.rdb.XRead(ctx, &goredis.XReadArgs{Streams: streams, Count: 512, Block: hubBlock}).Result()
		switch {
		case errors.Is(err, goredis.Nil):
			continue
		case err != nil:
			if ctx.Err() == nil {
				h.c.check(err)
				select { // Redis is down: readers find out when they poll
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
				}
			}
			continue
		}
		h.mu.Lock()
		for _, s := range res {
			r := h.readers[s.Stream]
			if r == nil || len(s.Messages) == 0 {
				continue
			}
			r.last = s.Messages[len(s.Messages)-1].ID
			r.deliver(s.Messages)
		}
		h.mu.Unlock()
	}
}
