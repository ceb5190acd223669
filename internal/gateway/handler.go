package gateway

import (
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/oncegate/oncegate/internal/identity"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/receipt"
	"github.com/oncegate/oncegate/internal/retry"
)

// serveChat handles POST /v1/chat/completions and POST /v1/messages: one
// logical request per arrival, driven through the retry engine.
func (g *Gateway) serveChat(p provider.Protocol) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		g.inflight.Add(1)
		defer g.inflight.Done()
		t := g.tenant(r)
		if t == nil {
			errorf(CodeUnauthorized, "missing or unknown API key").write(w, p, meta{})
			return
		}
		c, apiErr := g.admit(w, r, p, t)
		if apiErr != nil {
			apiErr.write(w, p, meta{})
			return
		}
		c.run()
	}
}

// admit reads and checks a request and builds its logical request. Every
// rejection names what was wrong.
func (g *Gateway) admit(w http.ResponseWriter, r *http.Request, p provider.Protocol, t *policy.Tenant) (*call, *apiError) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.pol.Limits.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, errorf(CodeRequestTooLarge, "request body is larger than %d bytes", tooLarge.Limit)
		}
		return nil, errorf(CodeInvalidRequest, "could not read the request body: %v", err)
	}
	cr, err := provider.ParseRequest(p, body)
	if err != nil {
		var inv *provider.InvalidRequestError
		if errors.As(err, &inv) {
			return nil, &apiError{code: CodeInvalidRequest, message: inv.Message, param: inv.Param}
		}
		return nil, errorf(CodeInvalidRequest, "%v", err)
	}
	alias := g.pol.Alias(cr.IR.Model)
	if alias == nil {
		return nil, &apiError{code: CodeModelNotFound, param: "model", message: "the model `" + cr.IR.Model + "` does not exist or you do not have access to it"}
	}
	canon, err := identity.Canonicalize(body)
	if err != nil {
		return nil, errorf(CodeInvalidRequest, "request body is not canonical JSON: %v", err)
	}
	budgets, apiErr := callerBudgets(r.Header)
	if apiErr != nil {
		return nil, apiErr
	}
	created := g.clock.Now()
	c := &call{g: g, w: w, r: r, proto: p, tenant: t, alias: alias, in: cr,
		id: uuid.Must(uuid.NewV7()).String(), created: created,
		deadline: retry.Deadline(created, alias.Engine.Deadline, budgets...),
		stream:   cr.IR.Stream,
	}
	c.streamEvents = r.Header.Get("X-Oncegate-Stream-Events") == "1"
	acceptRestart := c.streamEvents && r.Header.Get("X-Oncegate-Accept-Restart") == "1"
	needs := provider.NeedsOf(cr.IR)
	ineligible := alias.Ineligible(policy.Needs{Images: needs.Images, Audio: needs.Audio, Tools: needs.Tools,
		JSONSchema: needs.JSONSchema, Stream: needs.Stream, ContextTokens: cr.PromptTokens + cr.IR.MaxTokens}, t.MaxBoundary)
	h := receipt.Receipt{RequestID: c.id, Tenant: t.ID, Operation: p.Operation(), Model: alias.Name,
		RequestSHA256: identity.SHA256Hex(canon), CreatedAt: created, Deadline: c.deadline, Stream: c.stream,
		ClientRetryCount: clientRetryCount(r.Header),
		Request: receipt.Facts{EstimatedInputTokens: cr.PromptTokens, MaxOutputTokens: cr.IR.MaxTokens,
			MaxDataBoundary: t.MaxBoundary.String(), AcceptRestart: acceptRestart, IneligibleRoutes: ineligible}}
	c.rec = receipt.NewRecorder(alias, h)
	c.out = newOutput(c)
	return c, nil
}

// callerBudgets reads the caller's own time budgets (DESIGN §2.2):
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
