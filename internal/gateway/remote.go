package gateway

import (
	"bytes"
	"errors"
	"time"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/coord"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/sse"
)

// refuse answers an arrival whose flight cannot run (coord.Place.Err):
// the identity is in flight on another gateway with another body, or the
// shared coordination is down — then a finished request is still replayed
// from the store (docs/replicas.md), and anything else is refused with 503
// coordination_unavailable: never a silent fallback to this process alone.
func (c *call) refuse(err error) {
	var limited *coord.RateLimited
	if errors.As(err, &limited) {
		c.rateLimited(limited.RetryAfter)
		return
	}
	if errors.Is(err, coord.ErrConflict) {
		c.publishError(api.Errorf(api.CodeKeyReused, "the idempotency key is in use with a different request body"), api.Meta{})
		return
	}
	if rec, gerr := c.g.ledger.Get(c.ctx, c.identity); gerr == nil && rec.State.Finished() {
		c.log = &eventLog{store: c.g.ledger, requestID: c.id, gen: 1, lost: &c.leaseLost}
		if replace, follow := c.resolve(rec); !replace && follow == nil {
			return // answered from the store
		}
	}
	e := api.Errorf(api.CodeCoordinationUnavailable, "the gateway's shared coordination (Redis) is unreachable; nothing was sent, retry shortly")
	e.RetryAfter = 1
	c.publishError(e, api.Meta{})
}

// maxFollows bounds how often one arrival goes back to the store to find
// the request it joined has ended without an answer to give.
const maxFollows = 3

// follow serves an arrival whose logical request another gateway owns
// (coord.Place.Remote, or an in-progress record in the store): its flight
// here relays that gateway's output, from its first byte, to every client
// that joined it here. If the owner stops before the end, the store
// decides: the stored answer is replayed; a request whose owner's lease
// lapsed is settled (indeterminate, never re-dispatched: 502
// outcome_unknown, or an in-band stream_interrupted once output was
// sent); a released identity is claimed anew.
func (c *call) follow(rem *coord.Remote) {
	c.follows++
	c.followTo = nil
	c.joined = rem.RequestID
	now := c.g.clock.Now()
	if !rem.Deadline.IsZero() && outlasts(rem.Deadline, c.deadline) {
		c.publishError(c.g.joinTooLong(rem.RequestID, rem.Deadline, now), api.Meta{RequestID: rem.RequestID})
		return
	}
	started := false
	var err error
	if c.g.remotes == nil {
		err = coord.ErrOwnerGone
	} else {
		var sub coord.Subscription
		if sub, err = c.g.remotes.Watch(c.ctx, c.identity, *rem, c.clientRetries); err == nil {
			started, err = c.copyRemote(sub)
			sub.Leave()
		}
	}
	switch {
	case err == nil:
		return
	case errors.Is(err, coord.ErrAbandoned) && started:
		// The owner's client got an in-band error, and so did this one.
		c.flight.Finish(nil, nil)
		return
	case errors.Is(err, coord.ErrTruncated):
		e := api.Errorf(api.CodeKeyInUse, "this request's output is past the join buffer; retry when it has finished")
		e.RetryAfter = 1
		c.publishError(e, api.Meta{RequestID: rem.RequestID})
		return
	case started:
		c.finishFromStore(rem)
		return
	}
	c.awaitStored(rem)
}

// copyRemote relays a remote flight's output into this one; started says
// whether the head went out (then a failure is in-band).
func (c *call) copyRemote(sub coord.Subscription) (started bool, err error) {
	h, err := sub.Head(c.ctx)
	if err != nil {
		return false, err
	}
	head := *h
	head.Header = h.Header.Clone()
	head.Dedup = "joined"
	if head.Header.Get("Content-Type") != "text/event-stream" {
		// A whole answer: publish it with its body, in one piece.
		var body []byte
		for {
			b, done, err := sub.Next(c.ctx)
			if err != nil {
				return false, err
			}
			body = append(body, b...)
			if done {
				break
			}
		}
		c.g.metrics.ObserveDedup(c.tenant.ID, "joined")
		c.flight.Finish(&head, body)
		return true, nil
	}
	c.flight.SetHead(&head)
	for {
		b, done, err := sub.Next(c.ctx)
		if err != nil {
			return true, err
		}
		if done {
			c.g.metrics.ObserveDedup(c.tenant.ID, "joined")
			c.flight.Finish(nil, nil)
			return true, nil
		}
		c.flight.Write(b)
	}
}

// finishFromStore ends a relayed stream whose owner's output stopped
// reaching here (the owner died, or Redis went away): if the request
// finishes in the store with the answer the client has a prefix of, the
// rest comes from there; otherwise the stream ends in band — never with
// another generation's output. An owner that is not running any more
// (ownerGoneFor without its Redis subscription) cannot finish it: the
// stream ends then, not when the owner's lease lapses (docs/replicas.md).
func (c *call) finishFromStore(rem *coord.Remote) {
	var goneSince time.Time
	for {
		rec, err := c.g.ledger.Get(c.ctx, c.identity)
		now := c.g.clock.Now()
		switch {
		case err == nil && rec.RequestID == rem.RequestID && rec.State == ledger.InProgress && !rec.LeaseUntil.Before(now) && now.Before(c.deadline):
			// Its owner may still finish it — if it is running.
			if c.ownerGone(rem.Owner, &goneSince, now) {
				c.endRelayed(rem)
				return
			}
		case err == nil && rec.RequestID == rem.RequestID && rec.State == ledger.Succeeded && rec.Response != nil:
			if out, _ := c.flight.Output(); bytes.HasPrefix(rec.Response.Body, out) {
				c.g.metrics.ObserveDedup(c.tenant.ID, "joined")
				c.flight.Finish(nil, rec.Response.Body[len(out):])
				return
			}
			c.endRelayed(rem)
			return
		default:
			if err == nil && rec.RequestID == rem.RequestID && rec.State == ledger.InProgress {
				c.g.recovery.SettleOne(c.ctx, rec) // its owner's lease lapsed
			}
			c.endRelayed(rem)
			return
		}
		if !c.pause(storePoll) {
			c.endRelayed(rem)
			return
		}
	}
}

// ownerGoneFor is how long an owner must be seen not running before a
// stream relayed from it ends: long enough for a gateway that lost Redis
// for a moment (Redis restarted) to subscribe again.
const ownerGoneFor = 500 * time.Millisecond

// ownerGone reports whether owner has been seen not running for
// ownerGoneFor, since *since (zero: seen running, or not asked yet).
func (c *call) ownerGone(owner string, since *time.Time, now time.Time) bool {
	if c.g.remotes == nil {
		return false
	}
	alive, err := c.g.remotes.OwnerAlive(c.ctx, owner)
	if err != nil || alive {
		*since = time.Time{} // running, or it cannot be told: the store decides
		return false
	}
	if since.IsZero() {
		*since = now
	}
	return now.Sub(*since) >= ownerGoneFor
}

// endRelayed ends a relayed stream in band, saying how much of it the
// client saw, and leaves that evidence for the request's recovery.
func (c *call) endRelayed(rem *coord.Remote) {
	out, _ := c.flight.Output()
	emitted := visibleEvents(c.proto, out)
	if c.g.remotes != nil {
		c.g.remotes.Saw(rem.RequestID, emitted)
	}
	c.flight.Finish(nil, interruptFrame(c.proto, rem.RequestID, emitted))
}

// visibleEvents counts the visible events (text, tool calls, thinking)
// in a stream in protocol p — the gateway's count of emitted output.
func visibleEvents(p provider.Protocol, stream []byte) int64 {
	rd := sse.NewReader(bytes.NewReader(stream), len(stream)+1)
	dec := provider.NewDecoder(p)
	var n int64
	var evs []provider.Event
	for {
		ev, err := rd.Next()
		if err != nil {
			return n
		}
		evs, _ = dec.Decode(ev, evs[:0])
		for _, e := range evs {
			switch e.Kind {
			case provider.EvText, provider.EvRefusal, provider.EvToolStart, provider.EvToolArgs, provider.EvThinking, provider.EvRedactedThinking:
				n++
			}
		}
	}
}

// pause waits d, or returns false if the call's clients all left first.
func (c *call) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// interruptFrame ends a relayed stream whose owner stopped mid-output,
// after emitted visible events.
func interruptFrame(p provider.Protocol, requestID string, emitted int64) []byte {
	ce := &provider.ClientError{Type: "stream_interrupted", Code: "stream_interrupted", RequestID: requestID, EmittedTokens: emitted,
		Terminal: string(gw.TerminalIndeterminate), Reason: string(gw.ReasonIndeterminate),
		Message: "the gateway serving this stream stopped before it ended; its outcome is unknown (request " + requestID + ")"}
	return provider.NewEncoder(p, provider.ResponseID(p, requestID), 0, "").Error(nil, ce)
}

// storePoll is how often an arrival whose remote owner went quiet looks
// at the store for the request's fate.
const storePoll = 100 * time.Millisecond

// awaitStored waits for the store to say how the request ended, then
// answers as an arrival after it would: a replay, 502 outcome_unknown
// once the owner's lease lapsed (settling the request), or — the
// identity released — a new logical request.
func (c *call) awaitStored(rem *coord.Remote) {
	c.log = &eventLog{store: c.g.ledger, requestID: c.id, gen: 1, lost: &c.leaseLost}
	var goneSince time.Time
	for {
		rec, err := c.g.ledger.Get(c.ctx, c.identity)
		switch {
		case errors.Is(err, ledger.ErrNotFound) && c.follows < maxFollows:
			c.serve()
			return
		case err != nil && c.ctx.Err() == nil:
			e := api.Errorf(api.CodeStoreUnavailable, "the gateway's store is unreachable; retry shortly")
			if !errors.Is(err, ledger.ErrNotFound) {
				e.RetryAfter = 1
			}
			c.publishError(e, api.Meta{RequestID: rem.RequestID})
			return
		case err != nil:
			c.publishError(api.Errorf(api.CodeInternal, "the client went away"), api.Meta{RequestID: rem.RequestID})
			return
		case rec.RequestID == rem.RequestID && rec.State.Finished() && rec.Response != nil && rec.RequestSHA256 == c.requestSHA:
			// The request this arrival was placed to join finished before
			// any of its output reached here (its flight was still listed
			// as it ended): its answer is this arrival's, whatever the
			// replay windows say of requests that come later — and, the
			// record having succeeded, it is a replay (docs/identity.md).
			c.replay(rec, "replayed")
			return
		case rec.State.Finished(), rec.RequestID != rem.RequestID, rec.LeaseUntil.Before(c.g.clock.Now()):
			replace, follow := c.resolve(rec)
			switch {
			case follow != nil && c.follows < maxFollows:
				c.follow(follow)
			case follow != nil:
				e := api.Errorf(api.CodeKeyInUse, "this request is in progress elsewhere")
				e.RetryAfter = 1
				c.publishError(e, api.Meta{RequestID: follow.RequestID})
			case replace:
				c.serve()
			}
			return
		}
		// In progress under a live lease: its owner may still finish it
		// — if it is running. One that stopped cannot: the outcome is
		// unknown, as every gateway will say of it (docs/replicas.md).
		if c.ownerGone(rec.Owner, &goneSince, c.g.clock.Now()) {
			m := api.Meta{RequestID: rem.RequestID, Terminal: gw.TerminalIndeterminate, Dedup: "joined"}
			c.publishError(api.Errorf(api.CodeOutcomeUnknown, "the gateway running this request stopped mid-request; its outcome is unknown"), m)
			return
		}
		if !c.pause(storePoll) {
			c.publishError(api.Errorf(api.CodeInternal, "the client went away"), api.Meta{RequestID: rem.RequestID})
			return
		}
		if c.g.clock.Now().After(c.deadline) {
			c.publishError(c.g.joinTooLong(rem.RequestID, rec.LeaseUntil, c.g.clock.Now()), api.Meta{RequestID: rem.RequestID})
			return
		}
	}
}
