package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"

	"github.com/oncegate/oncegate/internal/accesslog"
	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/conversation"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/receipt"
	"github.com/oncegate/oncegate/internal/upstream"
)

// The request path as the packages mounted on it call it: requestPath
// implements conversation.RequestPath (the Responses API,
// docs/conversations.md) and tokencount.Gateway (token counts).

// turnCall is what a call knows of the conversation turn it is a try of.
type turnCall = conversation.Try

// conversations builds the Responses API over this gateway.
func (g *Gateway) conversations() *conversation.Service {
	return conversation.New(conversation.Config{Path: requestPath{g}, Ledger: g.ledger, Clock: g.clock, Log: g.log,
		Metrics: g.metrics, Secret: g.secret, Spend: g.tenants, Failpoint: failpoint})
}

// requestPath is the gateway as package conversation calls it; its
// methods are documented on conversation.RequestPath.
type requestPath struct{ g *Gateway }

// Policy is the configuration in force.
func (p requestPath) Policy() *policy.Policy { return p.g.policy() }

// Enter is enterTenant; the virtual key is GateKey's to check.
func (p requestPath) Enter(r *http.Request) (*policy.Tenant, func(), *api.Error) {
	t, _, release, apiErr := p.g.enterTenant(r)
	return t, release, apiErr
}

// ReadRequest is readRequest.
func (p requestPath) ReadRequest(w http.ResponseWriter, r *http.Request) (string, []byte, *api.Error) {
	return p.g.readRequest(w, r)
}

// NoteModel names the model on the access line.
func (p requestPath) NoteModel(r *http.Request, model string) {
	accesslog.Of(r.Context()).Set(func(a *accesslog.Entry) { a.Model = model })
}

// GateKey is gateKey for the request's virtual key, if any.
func (p requestPath) GateKey(r *http.Request, alias string) *api.Error {
	if lk := accesslog.KeyOf(r.Context()); lk != nil {
		return p.g.keys.Gate(lk, alias)
	}
	return nil
}

// KeyID is keyIDOf.
func (p requestPath) KeyID(r *http.Request) string { return keyIDOf(r) }

// Joins is joins.
func (p requestPath) Joins(r *http.Request, alias *policy.Alias) (bool, *api.Error) {
	return p.g.joins(r, alias)
}

// ClientRetries is clientRetryCount.
func (p requestPath) ClientRetries(h http.Header) int { return clientRetryCount(h) }

// SettleRecord is settleOne.
func (p requestPath) SettleRecord(ctx context.Context, rec *ledger.Record) {
	p.g.recovery.SettleOne(ctx, rec)
}

// Identify is stage 2 for a try: the call, under the try's request id and
// identity, and its receipt header with the turn's facts.
func (p requestPath) Identify(r *http.Request, t *policy.Tenant, alias *policy.Alias, cr *provider.ClientRequest,
	try *conversation.Try) (func(http.ResponseWriter), *api.Error) {
	g := p.g
	c, apiErr := g.identify(r, &admitted{proto: provider.Responses, tenant: t, alias: alias, parsed: cr, requestSHA: try.Turn.RequestSHA256})
	if apiErr != nil {
		return nil, apiErr
	}
	c.id, c.identity = try.Turn.RequestID, try.Identity()
	if lk := accesslog.KeyOf(r.Context()); lk != nil {
		// Each attempt reserves its worst case under the key as well
		// (docs/keys-and-teams.md); one that does not fit ends the try refused.
		c.key = g.keys.Use(lk, c.alias.Engine.Deadline)
	}
	h := c.rec.R
	try.Describe(h)
	c.turn = try
	// The engine's view of the request (its id seeds the jitter) is
	// taken from the header: start it again with the turn's.
	c.rec = receipt.NewRecorder(alias, *h)
	return func(w http.ResponseWriter) { g.place(w, r, c) }, nil
}

// StateCall reads and edits a stateful route's stored state: calls that
// generate nothing, outside the attempts.
func (p requestPath) StateCall(ctx context.Context, route *policy.Route, method, path string, body any) ([]byte, int, error) {
	g := p.g
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return nil, 0, err
		}
	}
	resp, err := g.cur.Load().clients[route.Provider.ID].Do(ctx, &upstream.Request{Method: method, Path: path, Body: b, Header: http.Header{}})
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	data, err := upstream.ReadAll(resp.Body, g.policy().Limits.MaxResponseBytes)
	if err != nil {
		return nil, resp.Status, err
	}
	if resp.Status/100 != 2 {
		ue := provider.ParseError(resp.Status, data)
		return data, resp.Status, fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.Status, g.scrub(ue.Message))
	}
	return data, resp.Status, nil
}

// TakeRate counts a request against its tenant's request rate
// (budget.requests_per_minute), or refuses it.
func (p requestPath) TakeRate(t *policy.Tenant) *api.Error {
	g := p.g
	ok, wait, err := g.tenants.Take(t.ID)
	if err != nil {
		e := api.Errorf(api.CodeCoordinationUnavailable, "the gateway's shared coordination (Redis) is unreachable; nothing was sent, retry shortly")
		e.RetryAfter = 1
		return e
	}
	if ok {
		return nil
	}
	g.metrics.ObserveTenantRejection(t.ID, api.CodeTenantRateLimited)
	e := api.Errorf(api.CodeTenantRateLimited, "tenant %s is over its %d requests per minute", t.ID, t.RequestsPerMinute)
	e.RetryAfter = int(math.Ceil(max(1, wait.Seconds())))
	return e
}

// AskCount makes the call and classifies what came back as an attempt's
// outcome would be.
func (p requestPath) AskCount(ctx context.Context, route *policy.Route, body []byte, beta string) (int64, gw.Kind, gw.Cause) {
	uc := p.g.cur.Load().clients[route.Provider.ID]
	counter, ok := uc.ep.(provider.TokenCounter)
	if !ok {
		return 0, gw.KindInvalidRequest, ""
	}
	out, err := counter.CountRequest(body, route.Model, beta)
	if err != nil {
		return 0, gw.KindInvalidRequest, ""
	}
	resp, err := uc.Do(ctx, &upstream.Request{Method: out.Method, Path: out.Path, Body: out.Body, Header: out.Header})
	if err != nil {
		var ue *upstream.Error
		if errors.As(err, &ue) {
			k, cause := ue.Kind()
			return 0, k, cause
		}
		return 0, gw.KindTimeoutBeforeResponse, ""
	}
	defer resp.Body.Close()
	data, err := upstream.ReadAll(resp.Body, 1<<20)
	if resp.Status != http.StatusOK {
		_, k, cause := uc.ep.Fault(resp.Status, resp.Header, data)
		return 0, k, cause
	}
	var c struct {
		InputTokens *int64 `json:"input_tokens"`
	}
	if err != nil || json.Unmarshal(data, &c) != nil || c.InputTokens == nil {
		return 0, gw.KindProtocolViolation, ""
	}
	return *c.InputTokens, gw.KindOK, ""
}
