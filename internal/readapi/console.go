package readapi

import (
	"cmp"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/breaker"
	"github.com/oncegate/oncegate/internal/console"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/metrics"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/receipt"
)

// The web console (docs/operations.md, "Console"): static assets under
// /ui/, and the JSON it reads under /v1/console/. The admin key sees every
// tenant; a tenant's key sees only its own requests, a virtual key only
// the requests it made.

// requestRow is one line of the console's list of logical requests.
type requestRow struct {
	RequestID string `json:"request_id"`
	Tenant    string `json:"tenant"`
	Operation string `json:"operation"`
	Model     string `json:"model"`
	// Route is the route that answered ("" when none did).
	Route     string    `json:"route"`
	CreatedAt time.Time `json:"created_at"`
	Attempts  int       `json:"attempts"`
	Providers []string  `json:"providers"`
	Terminal  string    `json:"terminal"`
	Reason    string    `json:"reason"`
	Tokens    int64     `json:"billable_tokens"`
	CostUSD   float64   `json:"cost_usd"`
}

// serveConsoleRequests lists recent logical requests, newest first,
// filtered by tenant, model, terminal and since (RFC 3339).
func (a *API) serveConsoleRequests(w http.ResponseWriter, r *http.Request, s readScope) {
	q := r.URL.Query()
	limit := 50
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n > 0 && n <= 500 {
		limit = n
	}
	var since time.Time
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			(&api.Error{Code: api.CodeInvalidRequest, Param: "since", Message: "since must be an RFC 3339 time, found " + strconv.Quote(v)}).Write(w, api.ProtocolOf(r), api.Meta{})
			return
		}
		since = t
	}
	rows := []requestRow{}
	tenants := s.tenants(a.gw.Policy())
	for _, tenant := range tenants {
		if f := q.Get("tenant"); f != "" && f != tenant {
			continue
		}
		// Scan a few pages per tenant: filters apply after reading.
		after := ""
		for page := 0; page < 10 && len(rows) < limit*len(tenants); page++ {
			list, err := a.listReceipts(r.Context(), tenant, receiptPage, after)
			if err != nil {
				api.StoreUnavailable(err).Write(w, api.ProtocolOf(r), api.Meta{})
				return
			}
			for _, rc := range list {
				after = rc.RequestID
				if !s.reads(rc) || (q.Get("model") != "" && rc.Model != q.Get("model")) || (q.Get("terminal") != "" && rc.Terminal != q.Get("terminal")) ||
					(!since.IsZero() && rc.CreatedAt.Before(since)) {
					continue
				}
				rows = append(rows, requestRow{RequestID: rc.RequestID, Tenant: rc.Tenant, Operation: rc.Operation, Model: rc.Model,
					Route: answeredBy(rc), CreatedAt: rc.CreatedAt, Attempts: len(rc.Attempts), Providers: rc.Totals.Providers, Terminal: rc.Terminal,
					Reason: rc.Reason, Tokens: rc.Totals.BillableTokens, CostUSD: rc.Totals.CostUSD})
			}
			if len(list) < receiptPage || (!since.IsZero() && len(list) > 0 && list[len(list)-1].CreatedAt.Before(since)) {
				break
			}
		}
	}
	slices.SortFunc(rows, func(a, b requestRow) int { return cmp.Compare(b.RequestID, a.RequestID) })
	if len(rows) > limit {
		rows = rows[:limit]
	}
	api.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": rows})
}

// answeredBy is the route whose attempt completed the request ("" when
// none did).
func answeredBy(rc *receipt.Receipt) string {
	for i := len(rc.Attempts) - 1; i >= 0; i-- {
		if a := &rc.Attempts[i]; a.Kind == string(gw.KindOK) {
			return a.Route
		}
	}
	return ""
}

// serveConsoleRequest answers one request's receipt.
func (a *API) serveConsoleRequest(w http.ResponseWriter, r *http.Request, s readScope) {
	rc, err := a.scopedReceipt(r.Context(), s, r.PathValue("id"))
	if err != nil {
		a.receiptError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, rc)
}

// serveConsoleVerify runs oncegate verify's check over a receipt, under
// the configuration in force.
func (a *API) serveConsoleVerify(w http.ResponseWriter, r *http.Request, s readScope) {
	rc, err := a.scopedReceipt(r.Context(), s, r.PathValue("id"))
	if err != nil {
		a.receiptError(w, r, err)
		return
	}
	drifts := receipt.Verify(a.gw.Policy(), rc)
	out := make([]map[string]any, len(drifts))
	for i, d := range drifts {
		out[i] = map[string]any{"code": d.Code, "attempt": d.Attempt, "expected": d.Expected, "found": d.Found, "message": d.String()}
	}
	api.WriteJSON(w, http.StatusOK, map[string]any{"request_id": rc.RequestID, "ok": len(drifts) == 0, "drifts": out})
}

// LiveBreaker is one route's breaker in the live panel.
type LiveBreaker struct {
	Route      string `json:"route"`
	State      string `json:"state"`
	Generation int64  `json:"generation"`
}

// LiveRoute is a route's load in the live panel: its share of the
// attempts this process dispatched, its attempts in flight across the
// fleet, its recent time to first token and its rate-limit headroom.
type LiveRoute struct {
	Route    string  `json:"route"`
	Share    float64 `json:"share"`
	InFlight int     `json:"in_flight"`
	TTFTMS   int64   `json:"ttft_ms"`
	Headroom float64 `json:"headroom"`
}

// LiveView is the live panel's answer.
type LiveView struct {
	metrics.Live
	// Tenant is the tenant whose figures these are; empty: every tenant's.
	Tenant             string        `json:"tenant,omitempty"`
	AttemptsPerRequest float64       `json:"attempts_per_logical_request"`
	Breakers           []LiveBreaker `json:"breakers"`
	Routes             []LiveRoute   `json:"routes"`
	// Budget is the fleet retry budget's headroom: for the admin key, and
	// only where this process keeps it (not in Redis).
	Budget map[string]any `json:"retry_budget"`
}

// serveConsoleLive answers the live panel: attempts per logical request,
// dedup outcomes and the turn ratio since the process started, and
// breaker states now — a tenant's key its own requests and the routes it
// may use; the admin key every tenant's, every route and the fleet retry
// budget's headroom, which counts every tenant's retries.
func (a *API) serveConsoleLive(w http.ResponseWriter, _ *http.Request, s readScope) {
	out := LiveView{Breakers: []LiveBreaker{}}
	var routes map[string]bool // nil: every route
	if s.admin {
		out.Live = a.metrics.Live("")
	} else {
		out.Live, out.Tenant, routes = a.metrics.Live(s.tenant.ID), s.tenant.ID, usableRoutes(a.gw.Policy(), s.tenant)
	}
	if out.Requests > 0 {
		out.AttemptsPerRequest = float64(out.Attempts) / float64(out.Requests)
	}
	if a.breakers != nil {
		a.breakers.States(func(route string, st breaker.State, gen int64) {
			if routes == nil || routes[route] {
				out.Breakers = append(out.Breakers, LiveBreaker{Route: route, State: st.String(), Generation: gen})
			}
		})
	}
	out.Routes = a.liveRoutes(routes)
	if a.budget != nil && s.admin {
		taken, allowed := a.budget.Headroom()
		out.Budget = map[string]any{"retries": taken, "allowed": allowed}
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// liveRoutes is the load of the policy's routes (of those in only, when
// not nil), in the policy's order.
func (a *API) liveRoutes(only map[string]bool) []LiveRoute {
	pol := a.gw.Policy()
	out := []LiveRoute{}
	var total int64
	for _, r := range pol.Routes {
		if only == nil || only[r.ID] {
			total += a.load.Dispatched(r.ID)
		}
	}
	for _, r := range pol.Routes {
		if only != nil && !only[r.ID] {
			continue
		}
		f := a.load.Figures(r.ID)
		lr := LiveRoute{Route: r.ID, InFlight: f.InFlight, TTFTMS: f.TTFT.Milliseconds(), Headroom: f.Headroom}
		if total > 0 {
			lr.Share = float64(a.load.Dispatched(r.ID)) / float64(total)
		}
		out = append(out, lr)
	}
	return out
}

// usableRoutes are the routes of every alias that tenant t may send to:
// those inside its data boundary.
func usableRoutes(pol *policy.Policy, t *policy.Tenant) map[string]bool {
	out := map[string]bool{}
	for _, a := range pol.Aliases {
		for _, r := range a.Routes {
			if r.Boundary <= t.MaxBoundary {
				out[r.ID] = true
			}
		}
	}
	return out
}

// consoleKeyNeeded is the 401 of a console request without a key it knows.
const consoleKeyNeeded = "the console needs a tenant's API key or the admin key"

// consoleRoutes mounts the console.
func (a *API) consoleRoutes(m *http.ServeMux) {
	m.Handle("GET /ui/", http.StripPrefix("/ui/", console.Handler()))
	m.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	m.HandleFunc("GET /v1/console/requests", a.readAuth(consoleKeyNeeded, a.serveConsoleRequests))
	m.HandleFunc("GET /v1/console/requests/{id}", a.readAuth(consoleKeyNeeded, a.serveConsoleRequest))
	m.HandleFunc("GET /v1/console/requests/{id}/verify", a.readAuth(consoleKeyNeeded, a.serveConsoleVerify))
	m.HandleFunc("GET /v1/console/live", a.readAuth(consoleKeyNeeded, a.serveConsoleLive))
}
