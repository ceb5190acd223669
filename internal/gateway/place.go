package gateway

import (
	"context"
	"errors"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/oncegate/oncegate/internal/accesslog"
	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/coord"
	"github.com/oncegate/oncegate/internal/tracing"
)

// place is stage 3: it puts a new logical request where it belongs. It
// owns its identity — it runs the call, on the fast path or the shared
// flight's, and reads its output — or joins the one in flight for it,
// reading the same output from its first byte.
func (g *Gateway) place(w http.ResponseWriter, r *http.Request, c *call) {
	p, t := c.proto, c.tenant
	if c.clientRetries > 0 {
		g.metrics.ObserveClientRetry()
	}
	place, err := g.flights.Place(r.Context(), coord.Arrival{Identity: c.identity, SHA256: c.requestSHA, RequestID: c.id,
		Deadline: c.deadline, ClientRetries: c.clientRetries, Tenant: t.ID, RequestsPerMinute: t.RequestsPerMinute})
	f := place.Flight
	switch {
	case errors.Is(err, coord.ErrConflict):
		api.Errorf(api.CodeKeyReused, "the idempotency key is in use with a different request body").Write(w, p, api.Meta{})
		return
	case errors.Is(err, coord.ErrTruncated):
		e := api.Errorf(api.CodeKeyInUse, "this request's output is past the join buffer; retry when it has finished")
		e.RetryAfter = 1
		e.Write(w, p, api.Meta{})
		return
	case err != nil:
		api.Errorf(api.CodeInternal, "place the request: %v", err).Write(w, p, api.Meta{})
		return
	case !place.Owner:
		if now := g.clock.Now(); outlasts(f.Deadline, c.deadline) {
			f.Leave()
			g.joinTooLong(f.RequestID, f.Deadline, now).Write(w, p, api.Meta{RequestID: f.RequestID})
			return
		}
		f.NoteClientRetry(c.clientRetries)
		g.metrics.ObserveDedup(t.ID, "joined")
		g.serveFlight(w, r, f.NewReader(), "joined")
		return
	}
	c.flight, c.ctx, c.rateTaken = f, place.Work, place.RateTaken
	c.access = accesslog.Of(r.Context())
	c.spanCtx, c.span = g.tracer.StartRequest(r.Header, tracing.Request{ID: c.id, Tenant: c.tenant.ID, Alias: c.alias.Name,
		KeyID: c.rec.R.KeyID, Protocol: c.proto, Stream: c.stream})
	if r.Header.Get("Idempotency-Key") != "" || r.Header.Get("X-Stainless-Retry-Count") != "" || c.turn != nil {
		f.SetGrace(g.rejoinGrace) // the caller can come back for this answer
	}
	g.inflight.Add(1)
	if place.Err == nil && place.Remote == nil {
		g.runInline(w, r, c)
		return
	}
	g.runShared(w, r, c, place)
}

// runInline is the fast path: a request this gateway runs. The client's
// own goroutine runs the call — stages 4 to 6 — and sends its output: a
// whole answer once it is complete, a stream as the call publishes it
// (directClient), from the goroutine that publishes it. No second
// goroutine, and no wake-up to hand each chunk over
// (docs/architecture.md, docs/performance.md). Others who join read the
// flight as it fills, as they would otherwise. A client that leaves ends
// its subscription at once, as serveFlight's would, and the flight's
// grace decides whether the call goes on.
func (g *Gateway) runInline(w http.ResponseWriter, r *http.Request, c *call) {
	rd := c.flight.NewReader()
	left := context.AfterFunc(r.Context(), rd.Leave)
	if c.stream {
		c.direct = &directClient{w: w, rc: http.NewResponseController(w), rd: rd}
	}
	func() {
		defer g.inflight.Done()
		defer c.endSpan()
		c.serve()
	}()
	if !left() {
		return // the client left; its subscription ended then
	}
	if d := c.direct; d != nil && d.sendRest(r.Context()) {
		rd.Leave()
		return
	}
	g.serveFlight(w, r, rd, "miss")
}

// directClient sends a stream's output to the client that owns it as the
// call publishes it: send runs on whichever goroutine flushed the output
// (the call's, or a hedge's that won its race), one at a time.
type directClient struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	rd      *coord.Reader
	started bool // the stream's head went out
	gone    bool // a write failed: the client is not reading
}

// send writes what the flight published since the last send. A head that
// is not a stream's (an error answer) is left to serveFlight, which sends
// it whole once the call is over.
func (d *directClient) send() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sendLocked()
}

func (d *directClient) sendLocked() {
	if d.gone {
		return
	}
	if !d.started {
		h := d.rd.Published()
		if h == nil || h.Header.Get("Content-Type") != "text/event-stream" {
			return
		}
		api.WriteHead(d.w, h, "miss")
		d.started = true
	}
	if b := d.rd.Ready(); len(b) > 0 {
		d.write(b)
	}
}

// write sends b and flushes it; a failure marks the client gone.
func (d *directClient) write(b []byte) {
	if _, err := d.w.Write(b); err != nil {
		d.gone = true
		return
	}
	if err := d.rc.Flush(); err != nil {
		d.gone = true
	}
}

// sendRest sends the rest of a stream once the call is over, and reports
// whether it did: false when no stream's head went out, for serveFlight.
func (d *directClient) sendRest(ctx context.Context) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.started {
		return d.gone
	}
	if !d.gone {
		relayChunks(ctx, d.w, d.rc, d.rd)
	}
	return true
}

// runShared is the shared-flight path: a stream, or a request another
// replica runs or refused. The call runs on a goroutine of its own and
// publishes to the flight as it goes; the client's goroutine relays the
// flight as every joiner does.
func (g *Gateway) runShared(w http.ResponseWriter, r *http.Request, c *call, place coord.Place) {
	go func() {
		defer g.inflight.Done()
		defer c.endSpan()
		switch {
		case place.Err != nil:
			c.refuse(place.Err)
		case place.Remote != nil:
			c.follow(place.Remote)
		default:
			c.serve()
		}
	}()
	g.serveFlight(w, r, c.flight.NewReader(), "miss")
}

// serveFlight sends a flight's output to one client — the owner or a
// joiner — from its first byte, flushing as it arrives. The client leaving
// ends only its own subscription.
func (g *Gateway) serveFlight(w http.ResponseWriter, r *http.Request, rd coord.Subscription, dedup string) {
	defer rd.Leave()
	ctx := r.Context()
	h, err := rd.Head(ctx)
	if err != nil {
		return
	}
	if h.Header.Get("Content-Type") != "text/event-stream" {
		// A whole answer: send it with its length in one write, not as
		// flushed chunks.
		var body []byte
		for {
			b, done, err := rd.Next(ctx)
			if err != nil {
				return
			}
			if body == nil {
				body = b
			} else {
				body = append(slices.Clip(body), b...)
			}
			if done {
				break
			}
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		api.WriteHead(w, h, dedup)
		_, _ = w.Write(body)
		return
	}
	api.WriteHead(w, h, dedup)
	relayChunks(ctx, w, http.NewResponseController(w), rd)
}

// relayChunks sends a stream's output from where rd is to its end,
// flushing each chunk, until the client stops reading.
func relayChunks(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, rd coord.Subscription) {
	for {
		b, done, err := rd.Next(ctx)
		if err != nil || done {
			return
		}
		if _, err := w.Write(b); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// outlasts reports whether an owner's deadline really exceeds a joiner's:
// by more than joinSlack, not by the moments between two admissions (the
// arrival that wins a claim may have been admitted a little later, and a
// shared claim keeps its deadline to the millisecond).
func outlasts(owner, joiner time.Time) bool { return owner.Sub(joiner) > joinSlack }

// joinSlack is how much longer than a joiner's deadline an owner's may
// run before the join is refused.
const joinSlack = time.Second

// joinTooLong is the 409 for a join that would outlast the joiner's own
// deadline (docs/identity.md). Its Retry-After is when the owner —
// request requestID, ending by deadline at the latest — may well have
// finished (joinRetryAfter), not the joiner's own horizon.
func (g *Gateway) joinTooLong(requestID string, deadline, now time.Time) *api.Error {
	e := api.Errorf(api.CodeKeyInUse, "this request is in progress and may take longer than your deadline allows")
	e.RetryAfter = joinRetryAfter(g.ownerStarted(requestID), deadline, now)
	return e
}

// joinRetryAfter estimates, in whole seconds (at least 1), how long a
// request that started at started and ends by deadline has still to run:
// about as long as it has run so far — the guess a client's exponential
// backoff makes, so a joiner that comes back early is told a longer wait
// — and never past the deadline. A zero started (unknown) leaves the
// deadline.
func joinRetryAfter(started, deadline, now time.Time) int {
	wait := deadline.Sub(now)
	if ran := now.Sub(started); !started.IsZero() && ran >= 0 && ran < wait {
		wait = ran
	}
	return int(math.Ceil(max(1, wait.Seconds())))
}

// ownerStarted is when the logical request requestID started: its call's
// creation when this gateway runs it, else the time its UUIDv7 request id
// carries (RFC 9562: milliseconds since the epoch), as another gateway
// made it; zero when the id is not one.
func (g *Gateway) ownerStarted(requestID string) time.Time {
	if v, ok := g.live.Load(requestID); ok {
		return v.(*call).created
	}
	id, err := uuid.Parse(requestID)
	if err != nil || id.Version() != 7 {
		return time.Time{}
	}
	return time.Unix(id.Time().UnixTime())
}
