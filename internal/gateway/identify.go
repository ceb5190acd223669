package gateway

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/oncegate/oncegate/internal/accesslog"
	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/identity"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/receipt"
	"github.com/oncegate/oncegate/internal/retry"
)

// identify is stage 2: it builds the logical request an admitted request
// is — its identity (the key's digest, the keyless fingerprint, or an
// identity of its own), its deadline, its receipt header and the routes
// it cannot use. Identities are in the scope of the tenant's file keys or
// of the virtual key the request came with (docs/identity.md). Nothing is
// shared or durable yet.
func (g *Gateway) identify(r *http.Request, a *admitted) (*call, *api.Error) {
	p, t, alias, cr, requestSHA, key := a.proto, a.tenant, a.alias, a.parsed, a.requestSHA, a.key
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
	keyID := keyIDOf(r)
	scope := identity.Scope(t.ID, keyID)
	tags, err := provider.Tags(provider.TagsOfHeader(r.Header.Values("X-Oncegate-Tags")), cr.Tags)
	if err != nil {
		return nil, invalidRequest(err)
	}
	h := receipt.Receipt{RequestID: c.id, Tenant: t.ID, KeyID: keyID, KeyName: keyNameOf(r), User: cr.IR.User, Tags: tags,
		Operation: p.Operation(), Model: alias.Name, RequestSHA256: c.requestSHA, CreatedAt: created, Deadline: c.deadline,
		Stream: c.stream, ClientRetryCount: c.clientRetries}
	join, apiErr := g.joins(r, alias)
	if apiErr != nil {
		return nil, apiErr
	}
	switch {
	case key != "":
		h.KeySHA256 = identity.KeyDigest(scope, p.Operation(), key)
		c.identity = "k:" + h.KeySHA256
	case join:
		h.Fingerprint = identity.Fingerprint(g.secret, scope, p.Operation(), c.requestSHA)
		c.identity = "f:" + h.Fingerprint
	default:
		// An independent sample: an identity of its own, which nothing
		// else shares (the receipt still carries the fingerprint).
		h.Fingerprint = identity.Fingerprint(g.secret, scope, p.Operation(), c.requestSHA)
		c.identity = "u:" + c.id
	}
	acceptRestart := c.streamEvents && r.Header.Get("X-Oncegate-Accept-Restart") == "1"
	c.dropParams = dropParamsOf(cr, t, alias)
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
			Uncarried: uncarried(cr), BoundaryOf: g.boundaryOf(r, t)}, t.MaxBoundary)}
	if cr.IR.Choices > 1 {
		h.Request.Choices = cr.IR.Choices
	}
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
		f := l.Uncarried(cr)
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
func (c *call) droppable(h http.Header) ([]string, *api.Error) {
	allowed := slices.Clone(c.alias.MayDrop)
	for _, v := range h.Values("X-Oncegate-May-Drop") {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name == "" {
				continue
			}
			if !provider.Droppable(provider.OpenAI, name) && !provider.Droppable(provider.Anthropic, name) && !policy.DroppableOn(c.alias.Routes, name) {
				return nil, &api.Error{Code: api.CodeInvalidRequest, Param: "X-Oncegate-May-Drop",
					Message: fmt.Sprintf("X-Oncegate-May-Drop names %q, which is not a field a route may drop (droppable: %s)", name, strings.Join(provider.DroppableNames(), ", "))}
			}
			allowed = append(allowed, name)
		}
	}
	c.mayDrop = allowed
	var native []string
	for _, f := range c.in.NativeOnly {
		if c.mayDropField(f) && provider.Droppable(c.in.Protocol, f) {
			c.dropped = append(c.dropped, f)
			continue
		}
		native = append(native, f)
	}
	return native, nil
}

// mayDropField reports whether the alias, the request or drop_params let
// a route drop field f, when f is droppable there.
func (c *call) mayDropField(f string) bool {
	return c.dropParams || slices.Contains(c.mayDrop, f)
}

// dropParamsOf is whether drop_params is in force for a request: the
// narrowest setting that says — the request body's, the tenant's (with
// a virtual key's own over it: keyring.Ring.Tenant), else the alias's (itself the alias's own or the top level's;
// docs/translation.md).
func dropParamsOf(cr *provider.ClientRequest, t *policy.Tenant, alias *policy.Alias) bool {
	switch {
	case cr.DropParams != nil:
		return *cr.DropParams
	case t.DropParams != nil:
		return *t.DropParams
	}
	return alias.DropParams
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
			if c.mayDropField(f) && ft.Droppable(c.in.Protocol, f) {
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
		if !c.mayDropField(f) || !ft.Droppable(c.in.Protocol, f) {
			out = append(out, f)
		}
	}
	return out
}

// joins says whether a keyless request may share a generation with an
// identical one in flight: X-Oncegate-Join when sent, else the narrowest
// keyless_join set — the virtual key's, the alias's, the configuration's
// (docs/identity.md).
func (g *Gateway) joins(r *http.Request, alias *policy.Alias) (bool, *api.Error) {
	join := g.policy().Idempotency.KeylessJoin
	if alias.KeylessJoin != nil {
		join = *alias.KeylessJoin
	}
	if lk := accesslog.KeyOf(r.Context()); lk != nil && lk.Stored.Spec.KeylessJoin != nil {
		join = *lk.Stored.Spec.KeylessJoin
	}
	return joinsOf(r.Header, join)
}

// joinsOf says whether a keyless request may share another's generation:
// X-Oncegate-Join (on, off) over the configuration's keyless_join.
func joinsOf(h http.Header, configured bool) (bool, *api.Error) {
	switch v := strings.TrimSpace(h.Get("X-Oncegate-Join")); strings.ToLower(v) {
	case "":
		return configured, nil
	case "on":
		return true, nil
	case "off":
		return false, nil
	default:
		return false, &api.Error{Code: api.CodeInvalidRequest, Param: "X-Oncegate-Join", Message: "X-Oncegate-Join must be on or off, found " + strconv.Quote(v)}
	}
}

// callerBudgets reads the caller's own time budgets (docs/retries.md):
// X-Oncegate-Timeout-Ms (milliseconds) and x-stainless-timeout (seconds,
// sent by the official SDKs). They only ever shorten the deadline.
func callerBudgets(h http.Header) ([]time.Duration, *api.Error) {
	var out []time.Duration
	if v := strings.TrimSpace(h.Get("X-Oncegate-Timeout-Ms")); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 || ms > 24*3600*1000 {
			return nil, &api.Error{Code: api.CodeInvalidRequest, Param: "X-Oncegate-Timeout-Ms",
				Message: "X-Oncegate-Timeout-Ms must be a whole number of milliseconds between 1 and 86400000, found " + strconv.Quote(v)}
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

// choicesOn is how many choices an answer from route carries: the
// request's n on a route that carries it, one where n is dropped.
func (c *call) choicesOn(route *policy.Route) int {
	if c.in.IR.Choices <= 1 || slices.Contains(c.droppedOn(route), "n") {
		return 1
	}
	return c.in.IR.Choices
}
