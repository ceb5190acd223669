package gateway

import (
	"context"
	"math"
	"net/http"
	"time"

	"github.com/oncegate/oncegate/internal/api"
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
		c.g.store.Answered()
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
	c.publishError(api.Errorf(api.CodeKeyInUse, "the idempotency key is changing hands; retry"), api.Meta{RequestID: c.id})
	return false
}

// storeDown answers an arrival the store could not claim: nothing was
// sent, so the client may come back (503 store_unavailable).
func (c *call) storeDown(err error) {
	if c.ctx.Err() != nil {
		c.publishError(api.Errorf(api.CodeInternal, "the client went away"), api.Meta{})
		return
	}
	c.g.store.Failed(err)
	c.g.log.Debug("store unavailable: request refused", "request_id", c.id, "err", err)
	e := api.Errorf(api.CodeStoreUnavailable, "the gateway's store is unreachable; nothing was sent, retry shortly")
	e.RetryAfter = 1
	c.publishError(e, api.Meta{})
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
	m := api.Meta{RequestID: rec.RequestID, Attempts: 0}
	if rec.RequestID == c.joined {
		m.Dedup = "joined" // the arrival joined it on its owner's gateway
	}
	if rec.Response != nil {
		m.Attempts = rec.Response.Attempts
	}
	if rec.State == ledger.InProgress {
		if rec.Owner == c.g.owner && !rec.LeaseUntil.Before(now) {
			if _, gaveUp := c.g.abandoned.Load(rec.RequestID); gaveUp {
				// This gateway's call abandoned it (its store failed):
				// give its lease up now and settle it, as any gateway
				// will once it lapses.
				c.g.giveUp.Run(context.Background())
				rec.LeaseUntil = now.Add(-time.Millisecond)
			}
		}
		if rec.LeaseUntil.Before(now) {
			// Its owner died: never re-dispatch blind (docs/replicas.md).
			c.g.recovery.SettleOne(c.ctx, rec)
			if c.turn != nil {
				// A try of a turn: the turn, not this try, decides what
				// follows — it is now unknown, and the next arrival
				// reconciles it or tries it again (docs/conversations.md).
				// The lease lapsed between the turn's look at the try
				// and this claim.
				e := api.Errorf(api.CodeConversationBusy, "response %s: its try ended when its gateway stopped; retry to reconcile it or try it again",
					c.turn.Turn.ResponseID)
				e.RetryAfter = 1
				c.publishError(e, m)
				return false, nil
			}
			e := api.Errorf(api.CodeOutcomeUnknown, "the request's owner stopped mid-request; its outcome is unknown (state indeterminate)")
			c.publishError(e, m)
			return false, nil
		}
		if rec.Owner != c.g.owner && c.g.remotes != nil && rec.RequestSHA256 == c.requestSHA {
			return false, &coord.Remote{Owner: rec.Owner, RequestID: rec.RequestID}
		}
		e := api.Errorf(api.CodeKeyInUse, "this request is in progress elsewhere")
		e.RetryAfter = int(math.Ceil(max(1, rec.LeaseUntil.Sub(now).Seconds())))
		c.publishError(e, m)
		return false, nil
	}
	age := now.Sub(rec.FinishedAt)
	if rec.Keyed() {
		if age > idem.Retention.D() {
			if idem.OnExpired == "reject" {
				c.publishError(api.Errorf(api.CodeKeyExpired, "the idempotency key expired (retention %v); use a new key", idem.Retention.D()), m)
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
		c.publishError(api.Errorf(api.CodeKeyReused, "the idempotency key was used with a different request body"), m)
		return false, nil
	}
	if rec.State == ledger.Indeterminate || rec.Response == nil {
		m.Terminal = "indeterminate"
		c.publishError(api.Errorf(api.CodeOutcomeUnknown, "the first attempt's outcome is unknown (state indeterminate); it will not be re-sent"), m)
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
	api.SetIDHeaders(h, rec.RequestID, resp.Attempts)
	if resp.Route != "" {
		h.Set("X-Oncegate-Route", resp.Route)
		if resp.Status < 400 {
			api.SetDropped(h, c.droppedOn(c.alias.Route(resp.Route)))
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
