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
// reader as soon as the owner's batcher wrote it. In a cluster one XREAD
// reads one slot's streams: the hub reads each owner's streams (which
// share the owner's hash tag, outputKey) with an XREAD of their own.
type hub struct {
	c      *Coordinator
	mu     sync.Mutex
	groups map[string]*hubGroup // by readGroup
}

// hubGroup is the readers of the streams one XREAD reads, and the
// goroutine reading them while there are any.
type hubGroup struct {
	readers map[string]*remote // by stream key
}

// hubBlock is how long one XREAD waits for entries: also how late a
// reader added meanwhile is first read.
const hubBlock = 20 * time.Millisecond

func newHub(c *Coordinator) *hub {
	return &hub{c: c, groups: map[string]*hubGroup{}}
}

func (h *hub) add(r *remote) {
	h.mu.Lock()
	g := h.groups[r.group]
	if g == nil {
		g = &hubGroup{readers: map[string]*remote{}}
		h.groups[r.group] = g
		select {
		case <-h.c.stop: // closed: nothing is read any more
		default:
			h.c.wg.Add(1)
			go h.run(r.group, g)
		}
	}
	g.readers[r.key] = r
	h.mu.Unlock()
}

func (h *hub) remove(r *remote) {
	h.mu.Lock()
	if g := h.groups[r.group]; g != nil && g.readers[r.key] == r {
		delete(g.readers, r.key)
	}
	h.mu.Unlock()
}

// run reads one group's streams until it has no reader left (then the
// group is forgotten: the next reader starts it again) or the
// coordinator stops.
func (h *hub) run(name string, g *hubGroup) {
	defer h.c.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-h.c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for ctx.Err() == nil {
		h.mu.Lock()
		n := len(g.readers)
		if n == 0 {
			delete(h.groups, name)
			h.mu.Unlock()
			return
		}
		streams := make([]string, 0, 2*n)
		for k := range g.readers {
			streams = append(streams, k)
		}
		for _, k := range streams[:n] {
			streams = append(streams, g.readers[k].last)
		}
		h.mu.Unlock()
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
			r := g.readers[s.Stream]
			if r == nil || len(s.Messages) == 0 {
				continue
			}
			r.last = s.Messages[len(s.Messages)-1].ID
			r.deliver(s.Messages)
		}
		h.mu.Unlock()
	}
}
