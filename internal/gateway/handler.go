package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/oncegate/oncegate/internal/coord"
	"github.com/oncegate/oncegate/internal/identity"
	"github.com/oncegate/oncegate/internal/memtune"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/receipt"
	"github.com/oncegate/oncegate/internal/retry"
)

// serveChat handles POST /v1/chat/completions and POST /v1/messages. Each
// arrival either owns a new logical request — it starts the call and reads
// its output — or joins the one in flight for the same identity, reading
// the same output from its first byte (docs/identity.md, docs/streaming.md).
func (g *Gateway) serveChat(p provider.Protocol) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t := g.tenant(r)
		if t == nil {
			errorf(CodeUnauthorized, "missing or unknown API key").write(w, p, meta{})
			return
		}
		lk, release, apiErr := g.enterBoth(r, t)
		if apiErr != nil {
			apiErr.write(w, p, meta{})
			return
		}
		defer release()
		c, apiErr := g.admit(w, r, p, t)
		if apiErr == nil {
			apiErr = c.admitKey(lk)
		}
		if apiErr != nil {
			apiErr.write(w, p, meta{})
			return
		}
		g.place(w, r, c)
	}
}

// enter counts a request of tenant t in progress until release is
// called, or refuses it when the tenant already has budget.max_concurrent
// in progress on this gateway — before its body is read, so a burst of
// large requests costs no memory.
func (g *Gateway) enter(t *policy.Tenant) (release func(), _ *apiError) {
	v, ok := g.running.Load(t.ID)
	if !ok {
		v, _ = g.running.LoadOrStore(t.ID, new(atomic.Int64))
	}
	n := v.(*atomic.Int64)
	if running := n.Add(1); t.MaxConcurrent > 0 && running > int64(t.MaxConcurrent) {
		n.Add(-1)
		g.metrics.ObserveTenantRejection(t.ID, CodeTenantConcurrency)
		e := errorf(CodeTenantConcurrency, "tenant %s has %d requests in progress, its limit on this gateway", t.ID, t.MaxConcurrent)
		e.retryAfter = 1
		return nil, e
	}
	return func() { n.Add(-1) }, nil
}

// place puts a new logical request where it belongs: it owns its identity
// — it starts the call and reads its output — or joins the one in flight
// for it, reading the same output from its first byte.
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
		errorf(CodeKeyReused, "the idempotency key is in use with a different request body").write(w, p, meta{})
		return
	case errors.Is(err, coord.ErrTruncated):
		e := errorf(CodeKeyInUse, "this request's output is past the join buffer; retry when it has finished")
		e.retryAfter = 1
		e.write(w, p, meta{})
		return
	case err != nil:
		errorf(CodeInternal, "place the request: %v", err).write(w, p, meta{})
		return
	case !place.Owner:
		if now := g.clock.Now(); outlasts(f.Deadline, c.deadline) {
			f.Leave()
			g.joinTooLong(f.RequestID, f.Deadline, now).write(w, p, meta{requestID: f.RequestID})
			return
		}
		f.NoteClientRetry(c.clientRetries)
		g.metrics.ObserveDedup(t.ID, "joined")
		g.serveFlight(w, r, f.NewReader(), "joined")
		return
	}
	c.flight, c.ctx, c.rateTaken = f, place.Work, place.RateTaken
	c.access = accessOf(r.Context())
	c.startRequestSpan(r.Header)
	if r.Header.Get("Idempotency-Key") != "" || r.Header.Get("X-Stainless-Retry-Count") != "" || c.turn != nil {
		f.SetGrace(g.rejoinGrace) // the caller can come back for this answer
	}
	g.inflight.Add(1)
	if !c.stream && place.Err == nil && place.Remote == nil {
		// A whole answer is sent once it is complete, so the client's own
		// goroutine runs the call: no second goroutine and no wake-up to
		// hand the answer over (docs/performance.md). Others who join
		// read the flight as it fills, as they would otherwise. A client
		// that leaves ends its subscription at once, as serveFlight's
		// would, and the flight's grace decides whether the call goes on.
		rd := f.NewReader()
		left := context.AfterFunc(r.Context(), rd.Leave)
		func() {
			defer g.inflight.Done()
			defer c.endRequestSpan()
			c.run()
		}()
		if left() {
			g.serveFlight(w, r, rd, "miss")
		}
		return
	}
	go func() {
		defer g.inflight.Done()
		defer c.endRequestSpan()
		switch {
		case place.Err != nil:
			c.refuse(place.Err)
		case place.Remote != nil:
			c.follow(place.Remote)
		default:
			c.run()
		}
	}()
	g.serveFlight(w, r, f.NewReader(), "miss")
}

// admit reads and checks a request and builds its logical request. Every
// rejection names what was wrong.
func (g *Gateway) admit(w http.ResponseWriter, r *http.Request, p provider.Protocol, t *policy.Tenant) (*call, *apiError) {
	key, body, apiErr := g.readRequest(w, r)
	if apiErr != nil {
		return nil, apiErr
	}
	cr, err := provider.ParseRequest(p, body)
	if err != nil {
		return nil, invalidRequest(err)
	}
	accessOf(r.Context()).set(func(a *accessLog) { a.model = cr.IR.Model })
	alias := g.policy().Alias(cr.IR.Model)
	if alias == nil {
		return nil, modelNotFound(cr.IR.Model)
	}
	if alias.Stateful {
		return nil, &apiError{code: CodeInvalidRequest, param: "model", message: "the model `" + alias.Name +
			"` keeps its conversations at the provider (openai-responses): use it on POST /v1/responses"}
	}
	canon, err := identity.Canonicalize(body)
	if err != nil {
		return nil, errorf(CodeInvalidRequest, "request body is not canonical JSON: %v", err)
	}
	return g.newCall(r, p, t, alias, cr, identity.SHA256Hex(canon), key)
}

// readRequest reads a request's Idempotency-Key (validated when sent)
// and its body, within the body limit.
func (g *Gateway) readRequest(w http.ResponseWriter, r *http.Request) (string, []byte, *apiError) {
	key := r.Header.Get("Idempotency-Key")
	if _, sent := r.Header["Idempotency-Key"]; sent {
		if err := identity.ValidateKey(key); err != nil {
			return "", nil, &apiError{code: CodeInvalidKey, param: "Idempotency-Key", message: err.Error()}
		}
	}
	if n := r.ContentLength; n >= memtune.LargeBytes && n <= g.policy().Limits.MaxBodyBytes {
		// The body, its parsed text and the upstream request are alive
		// together, and parsing makes transient copies: tell the
		// collector before they exist (docs/performance.md).
		context.AfterFunc(r.Context(), memtune.Hold(4*n))
	}
	body, err := readBody(http.MaxBytesReader(w, r.Body, g.policy().Limits.MaxBodyBytes), r.ContentLength, g.policy().Limits.MaxBodyBytes)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return "", nil, errorf(CodeRequestTooLarge, "request body is larger than %d bytes", tooLarge.Limit)
		}
		var late *bodyTimeout
		if errors.As(err, &late) {
			// What is left of the body may still come: the connection
			// cannot carry another request (docs/api.md, "Limits").
			w.Header().Set("Connection", "close")
			return "", nil, errorf(CodeRequestTimeout, "%v", late)
		}
		return "", nil, errorf(CodeInvalidRequest, "could not read the request body: %v", err)
	}
	if g.cur.Load().logBodies {
		accessOf(r.Context()).set(func(a *accessLog) { a.body = string(body) })
	}
	return key, body, nil
}

// readBody reads a request body into one buffer of the size its
// Content-Length announces (io.ReadAll would grow one by doubling,
// allocating about twice the body on the way), or by doubling when it
// announces none.
func readBody(r io.Reader, contentLength, limit int64) ([]byte, error) {
	if contentLength <= 0 || contentLength > limit {
		return io.ReadAll(r)
	}
	// One byte more than announced, so that a body longer than its
	// Content-Length is still read to its end (and refused at the limit).
	buf := make([]byte, 0, contentLength+1)
	for {
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grow: the body is longer than announced
		}
	}
}

// invalidRequest is the 400 for a request body the parser refused.
func invalidRequest(err error) *apiError {
	var inv *provider.InvalidRequestError
	if errors.As(err, &inv) {
		return &apiError{code: CodeInvalidRequest, message: inv.Message, param: inv.Param}
	}
	return errorf(CodeInvalidRequest, "%v", err)
}

// modelNotFound is the 404 for a model no alias names.
func modelNotFound(model string) *apiError {
	return &apiError{code: CodeModelNotFound, param: "model", message: "the model `" + model + "` does not exist or you do not have access to it"}
}

// newCall builds the logical request for a parsed request: its deadline,
// its identity (the key's digest, the keyless fingerprint, or an identity
// of its own), its receipt header and the routes it cannot use.
func (g *Gateway) newCall(r *http.Request, p provider.Protocol, t *policy.Tenant, alias *policy.Alias, cr *provider.ClientRequest,
	requestSHA, key string) (*call, *apiError) {
	budgets, apiErr := callerBudgets(r.Header)
	if apiErr != nil {
		return nil, apiErr
	}
	created := g.clock.Now()
	c := &call{g: g, proto: p, tenant: t, alias: alias, in: cr, live: g.cur.Load(),
		id: uuid.Must(uuid.NewV7()).String(), created: created, requestSHA: requestSHA,
		deadline:      retry.Deadline(created, alias.Engine.Deadline, budgets...),
		stream:        cr.IR.Stream,
		streamEvents:  r.Header.Get("X-Oncegate-Stream-Events") == "1",
		anthropicBeta: r.Header.Get("anthropic-beta"),
		clientRetries: clientRetryCount(r.Header),
	}
	h := receipt.Receipt{RequestID: c.id, Tenant: t.ID, KeyID: keyIDOf(r), Operation: p.Operation(), Model: alias.Name,
		RequestSHA256: c.requestSHA, CreatedAt: created, Deadline: c.deadline, Stream: c.stream, ClientRetryCount: c.clientRetries}
	join, apiErr := joinsOf(r.Header, g.policy().Idempotency.KeylessJoin)
	if apiErr != nil {
		return nil, apiErr
	}
	switch {
	case key != "":
		h.KeySHA256 = identity.KeyDigest(t.ID, p.Operation(), key)
		c.identity = "k:" + h.KeySHA256
	case join:
		h.Fingerprint = identity.Fingerprint(g.secret, t.ID, p.Operation(), c.requestSHA)
		c.identity = "f:" + h.Fingerprint
	default:
		// An independent sample: an identity of its own, which nothing
		// else shares (the receipt still carries the fingerprint).
		h.Fingerprint = identity.Fingerprint(g.secret, t.ID, p.Operation(), c.requestSHA)
		c.identity = "u:" + c.id
	}
	acceptRestart := c.streamEvents && r.Header.Get("X-Oncegate-Accept-Restart") == "1"
	native, apiErr := c.droppable(r.Header)
	if apiErr != nil {
		return nil, apiErr
	}
	needs := provider.NeedsOf(cr.IR)
	h.Request = receipt.Facts{EstimatedInputTokens: cr.PromptTokens, MaxOutputTokens: cr.IR.MaxTokens,
		MaxDataBoundary: t.MaxBoundary.String(), AcceptRestart: acceptRestart, NoContinuation: cr.IR.Thinking, DroppableFields: c.dropped,
		IneligibleRoutes: alias.Ineligible(policy.Needs{Images: needs.Images, Audio: needs.Audio, Tools: needs.Tools,
			JSONSchema: needs.JSONSchema, Stream: needs.Stream, ContextTokens: cr.PromptTokens + cr.IR.MaxTokens,
			Protocol: string(cr.Protocol), NativeOnly: native, NativeOnlyOn: c.nativeOnlyOn, Embeddings: p == provider.Embeddings,
			Uncarried: uncarried(cr)}, t.MaxBoundary)}
	c.rec = receipt.NewRecorder(alias, h)
	c.out = newOutput(c)
	return c, nil
}

// uncarried answers policy.Needs.Uncarried for cr: what a type that is a
// provider.FieldLimiter cannot carry of it, found once per type.
func uncarried(cr *provider.ClientRequest) func(provider.Type) []string {
	found := map[provider.Type][]string{}
	return func(t provider.Type) []string {
		l, ok := t.(provider.FieldLimiter)
		if !ok || cr.Protocol == provider.Embeddings {
			return nil
		}
		if f, seen := found[t]; seen {
			return f
		}
		f := l.Uncarried(cr.Protocol, cr.Body)
		found[t] = f
		return f
	}
}

// droppable splits the request's native-only fields (docs/translation.md)
// into those that keep it on routes of its own protocol (returned) and
// those a route of the other protocol may drop (c.dropped): droppable
// fields the alias's may_drop or the request's X-Oncegate-May-Drop
// header lists. A header naming a field that cannot be dropped is a 400
// naming it.
func (c *call) droppable(h http.Header) ([]string, *apiError) {
	allowed := slices.Clone(c.alias.MayDrop)
	for _, v := range h.Values("X-Oncegate-May-Drop") {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name == "" {
				continue
			}
			if !provider.Droppable(provider.OpenAI, name) && !provider.Droppable(provider.Anthropic, name) && !policy.DroppableOn(c.alias.Routes, name) {
				return nil, &apiError{code: CodeInvalidRequest, param: "X-Oncegate-May-Drop",
					message: fmt.Sprintf("X-Oncegate-May-Drop names %q, which is not a field a route may drop (droppable: %s)", name, strings.Join(provider.DroppableNames(), ", "))}
			}
			allowed = append(allowed, name)
		}
	}
	c.mayDrop = allowed
	var native []string
	for _, f := range c.in.NativeOnly {
		if slices.Contains(allowed, f) && provider.Droppable(c.in.Protocol, f) {
			c.dropped = append(c.dropped, f)
			continue
		}
		native = append(native, f)
	}
	return native, nil
}

// droppedOn is what an attempt on route drops of the request: the
// droppable fields, on a route of the other protocol; none on its own.
// A type with its own field table drops what that table lets it.
func (c *call) droppedOn(route *policy.Route) []string {
	if route == nil {
		return nil
	}
	if ft, ok := route.Provider.Impl.(provider.FieldTable); ok {
		var out []string
		for _, f := range ft.NativeOnly(c.in.Protocol, c.in.Body) {
			if slices.Contains(c.mayDrop, f) && ft.Droppable(c.in.Protocol, f) {
				out = append(out, f)
			}
		}
		return out
	}
	if route.Provider.Impl.Spec().Protocol == c.in.Protocol {
		return nil
	}
	return c.dropped
}

// nativeOnlyOn lists the request's fields a route of a type with its own
// field table cannot carry and may not drop (policy.Needs.NativeOnlyOn).
func (c *call) nativeOnlyOn(ft provider.FieldTable) []string {
	var out []string
	for _, f := range ft.NativeOnly(c.in.Protocol, c.in.Body) {
		if !slices.Contains(c.mayDrop, f) || !ft.Droppable(c.in.Protocol, f) {
			out = append(out, f)
		}
	}
	return out
}

// joinsOf says whether a keyless request may share another's generation:
// X-Oncegate-Join (on, off) over the configuration's keyless_join.
func joinsOf(h http.Header, configured bool) (bool, *apiError) {
	switch v := strings.TrimSpace(h.Get("X-Oncegate-Join")); strings.ToLower(v) {
	case "":
		return configured, nil
	case "on":
		return true, nil
	case "off":
		return false, nil
	default:
		return false, &apiError{code: CodeInvalidRequest, param: "X-Oncegate-Join", message: "X-Oncegate-Join must be on or off, found " + strconv.Quote(v)}
	}
}

// callerBudgets reads the caller's own time budgets (docs/retries.md):
// X-Oncegate-Timeout-Ms (milliseconds) and x-stainless-timeout (seconds,
// sent by the official SDKs). They only ever shorten the deadline.
func callerBudgets(h http.Header) ([]time.Duration, *apiError) {
	var out []time.Duration
	if v := strings.TrimSpace(h.Get("X-Oncegate-Timeout-Ms")); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 || ms > 24*3600*1000 {
			return nil, &apiError{code: CodeInvalidRequest, param: "X-Oncegate-Timeout-Ms",
				message: "X-Oncegate-Timeout-Ms must be a whole number of milliseconds between 1 and 86400000, found " + strconv.Quote(v)}
		}
		out = append(out, time.Duration(ms)*time.Millisecond)
	}
	if v := strings.TrimSpace(h.Get("X-Stainless-Timeout")); v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err == nil && s > 0 && s < 86400 && !math.IsNaN(s) {
			out = append(out, time.Duration(s*float64(time.Second)))
		}
	}
	return out, nil
}

// clientRetryCount reads x-stainless-retry-count: how many times an
// official SDK retried this request on its own.
func clientRetryCount(h http.Header) int {
	n, err := strconv.Atoi(strings.TrimSpace(h.Get("X-Stainless-Retry-Count")))
	if err != nil || n < 0 || n > 1000 {
		return 0
	}
	return n
}
