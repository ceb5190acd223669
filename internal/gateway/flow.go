package gateway

import (
	"context"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/oncegate/oncegate/internal/coord"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/retry"
)

// record is the ledger entry this call claims.
func (c *call) record() *ledger.Record {
	return &ledger.Record{Identity: c.identity, RequestID: c.id, Tenant: c.tenant.ID, Operation: c.proto.Operation(),
		RequestSHA256: c.requestSHA, Stream: c.stream, State: ledger.InProgress, Owner: c.g.owner, Generation: 1,
		LeaseUntil: c.created.Add(c.g.lease), CreatedAt: c.created}
}

// claim makes this call the owner of its identity in the ledger, with
// logical_request_created and, when the engine dispatches, attempt 1's
// reserved and dispatched events in the same durable commit. If the
// identity already has a record, claim answers from it (a replay, or the
// error the arrival table of docs/identity.md names) and returns false.
func (c *call) claim(d retry.Decision) bool {
	c.log = &eventLog{store: c.g.ledger, requestID: c.id, gen: 1, lost: &c.leaseLost}
	evs := func() []ledger.Event {
		c.log.seq = 0
		out := []ledger.Event{c.log.event(ledger.EvCreated, c.created, c.rec.R)}
		if d.Dispatches() {
			out = append(out, c.dispatchEvents(d, 1)...)
		}
		return out
	}
	for range 3 {
		existing, created, err := c.g.ledger.Claim(c.ctx, c.record(), evs())
		if err != nil {
			c.storeDown(err)
			return false
		}
		c.g.store.answered()
		if created {
			c.g.metrics.ObserveDedup(c.tenant.ID, "miss")
			c.g.live.Store(c.id, c)
			return true
		}
		replace, follow := c.resolve(existing)
		if follow != nil {
			c.followTo = follow
			return false
		}
		if replace {
			ok, err := c.g.ledger.Replace(c.ctx, existing.RequestID, c.record(), evs())
			if err != nil {
				c.storeDown(err)
				return false
			}
			if ok {
				c.g.metrics.ObserveDedup(c.tenant.ID, "miss")
				c.g.live.Store(c.id, c)
				return true
			}
		} else {
			return false // answered
		}
	}
	c.publishError(errorf(CodeKeyInUse, "the idempotency key is changing hands; retry"), meta{requestID: c.id})
	return false
}

// storeDown answers an arrival the store could not claim: nothing was
// sent, so the client may come back (503 store_unavailable).
func (c *call) storeDown(err error) {
	if c.ctx.Err() != nil {
		c.publishError(errorf(CodeInternal, "the client went away"), meta{})
		return
	}
	c.g.store.failed(err)
	c.g.log.Debug("store unavailable: request refused", "request_id", c.id, "err", err)
	e := errorf(CodeStoreUnavailable, "the gateway's store is unreachable; nothing was sent, retry shortly")
	e.retryAfter = 1
	c.publishError(e, meta{})
}

// resolve answers an arrival whose identity already has a record (
// docs/identity.md): a replay, 422 for a different body, 502 for an indeterminate
// outcome, 409 while another owner holds it or past retention. replace
// asks to start a new logical request in the record's place instead;
// follow, to relay the request another gateway runs (replicas). With
// neither, the arrival was answered.
func (c *call) resolve(rec *ledger.Record) (replace bool, follow *coord.Remote) {
	now := c.g.clock.Now()
	idem := c.g.policy().Idempotency
	m := meta{requestID: rec.RequestID, attempts: 0}
	if rec.Response != nil {
		m.attempts = rec.Response.Attempts
	}
	if rec.State == ledger.InProgress {
		if rec.Owner == c.g.owner && !rec.LeaseUntil.Before(now) {
			if _, gaveUp := c.g.abandoned.Load(rec.RequestID); gaveUp {
				// This gateway's call abandoned it (its store failed):
				// give its lease up now and settle it, as any gateway
				// will once it lapses.
				c.g.giveUpAbandoned(false)
				rec.LeaseUntil = now.Add(-time.Millisecond)
			}
		}
		if rec.LeaseUntil.Before(now) {
			// Its owner died: never re-dispatch blind (docs/replicas.md).
			c.g.settleOne(c.ctx, rec)
			if c.turn != nil {
				// A try of a turn: the turn, not this try, decides what
				// follows — it is now unknown, and the next arrival
				// reconciles it or tries it again (docs/conversations.md).
				// The lease lapsed between the turn's look at the try
				// and this claim.
				e := errorf(CodeConversationBusy, "response %s: its try ended when its gateway stopped; retry to reconcile it or try it again",
					c.turn.turn.ResponseID)
				e.retryAfter = 1
				c.publishError(e, m)
				return false, nil
			}
			e := errorf(CodeOutcomeUnknown, "the request's owner stopped mid-request; its outcome is unknown (state indeterminate)")
			c.publishError(e, m)
			return false, nil
		}
		if rec.Owner != c.g.owner && c.g.remotes != nil && rec.RequestSHA256 == c.requestSHA {
			return false, &coord.Remote{Owner: rec.Owner, RequestID: rec.RequestID}
		}
		e := errorf(CodeKeyInUse, "this request is in progress elsewhere")
		e.retryAfter = int(math.Ceil(max(1, rec.LeaseUntil.Sub(now).Seconds())))
		c.publishError(e, m)
		return false, nil
	}
	age := now.Sub(rec.FinishedAt)
	if rec.Keyed() {
		if age > idem.Retention.D() {
			if idem.OnExpired == "reject" {
				c.publishError(errorf(CodeKeyExpired, "the idempotency key expired (retention %v); use a new key", idem.Retention.D()), m)
				return false, nil
			}
			return true, nil
		}
	} else {
		window := idem.FingerprintReplayWindow.D()
		if c.clientRetries > 0 {
			window = max(window, idem.SDKRetryWindow.D())
		}
		if age >= window {
			// The same question asked again later: a new request. With
			// no window that holds even at the instant the first
			// finished (a clock may not have moved).
			return true, nil
		}
	}
	if rec.RequestSHA256 != c.requestSHA {
		c.publishError(errorf(CodeKeyReused, "the idempotency key was used with a different request body"), m)
		return false, nil
	}
	if rec.State == ledger.Indeterminate || rec.Response == nil {
		m.terminal = "indeterminate"
		c.publishError(errorf(CodeOutcomeUnknown, "the first attempt's outcome is unknown (state indeterminate); it will not be re-sent"), m)
		return false, nil
	}
	c.replay(rec, "replayed")
	return false, nil
}

// replay answers from a finished record's stored response; dedup is how
// the answer is labelled (an arrival that joined the request in flight
// and got its answer from the store is "joined").
func (c *call) replay(rec *ledger.Record, dedup string) {
	resp := rec.Response
	h := http.Header{}
	h.Set("Content-Type", resp.ContentType)
	setIDHeaders(h, rec.RequestID, resp.Attempts)
	if resp.Route != "" {
		h.Set("X-Oncegate-Route", resp.Route)
		if resp.Status < 400 {
			setDropped(h, c.droppedOn(c.alias.Route(resp.Route)))
		}
	}
	if resp.Status >= 400 {
		h.Set("x-should-retry", "false")
	}
	if resp.ContentType == "text/event-stream" {
		h.Set("Cache-Control", "no-cache")
	}
	c.flight.Finish(&coord.Head{Status: resp.Status, Header: h, Dedup: dedup}, resp.Body)
	c.g.metrics.ObserveDedup(rec.Tenant, dedup)
	// Whoever joined this arrival's flight reads the same head, so it is
	// counted as the head says.
	joined, replayed := 0, 1+c.flight.Joined()
	if dedup == "joined" {
		joined, replayed = replayed, 0
	}
	_ = c.g.ledger.AddDedup(context.Background(), rec.Tenant, rec.RequestID, joined, replayed, max(c.clientRetries, c.flight.ClientRetries()))
}

// writeHead writes a response head; dedup names X-Oncegate-Dedup unless the
// head overrides it.
func writeHead(w http.ResponseWriter, h *coord.Head, dedup string) {
	if h.Code != "" {
		noteCode(w, h.Code)
	}
	dst := w.Header()
	for k, v := range h.Header {
		dst[k] = v
	}
	if h.Dedup != "" {
		dedup = h.Dedup
	}
	if dedup != "" {
		dst.Set("X-Oncegate-Dedup", dedup)
	}
	w.WriteHeader(h.Status)
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
		writeHead(w, h, dedup)
		_, _ = w.Write(body)
		return
	}
	writeHead(w, h, dedup)
	rc := http.NewResponseController(w)
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
func (g *Gateway) joinTooLong(requestID string, deadline, now time.Time) *apiError {
	e := errorf(CodeKeyInUse, "this request is in progress and may take longer than your deadline allows")
	e.retryAfter = joinRetryAfter(g.ownerStarted(requestID), deadline, now)
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
