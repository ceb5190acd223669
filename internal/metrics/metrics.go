// Package metrics exports oncegate's Prometheus metrics (docs/operations.md), all
// prefixed oncegate_. Collectors live on an injected registry; the gateway
// feeds them through typed Observe methods, once per logical request and
// per attempt, from what the receipt records. A Metrics is safe for
// concurrent use.
package metrics

import (
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics holds the collectors.
type Metrics struct {
	reg              *prometheus.Registry
	logical          *prometheus.CounterVec
	attempts         *prometheus.CounterVec
	perRequest       prometheus.Histogram
	dedup            *prometheus.CounterVec
	clientRetries    prometheus.Counter
	ttft             *prometheus.HistogramVec
	duration         *prometheus.HistogramVec
	resumes          *prometheus.CounterVec
	restarts         *prometheus.CounterVec
	interrupted      *prometheus.CounterVec
	afterOutput      prometheus.Counter
	deadline         prometheus.Counter
	budgetRejections prometheus.Counter
	tenantRejections *prometheus.CounterVec
	adminActions     *prometheus.CounterVec
	hedges           *prometheus.CounterVec
	selected         *prometheus.CounterVec
	billable         *prometheus.CounterVec
	cost             *prometheus.CounterVec
	errorResponses   *prometheus.CounterVec
	auxRequests      *prometheus.CounterVec
	auxAttempts      *prometheus.CounterVec
	turns            *prometheus.CounterVec
	orphans          prometheus.Counter
	branches         prometheus.Counter
	turnRatio        prometheus.GaugeFunc
	budgetRatio      *prometheus.GaugeVec
	budgetAlerts     *prometheus.CounterVec
	// all are the live panel's counts of every tenant; tenants each
	// tenant's (tenant id → *liveCounts), so that a tenant's key sees
	// only its own.
	all     liveCounts
	tenants sync.Map
}

// liveCounts are the live panel's counts of one tenant, or of all.
type liveCounts struct {
	requests, attempts        atomic.Int64
	userTurns, assistantTurns atomic.Int64
	dedup                     sync.Map // result → *atomic.Int64
}

// Live is what the console's live panel shows, since the process started.
type Live struct {
	Requests  int64            `json:"logical_requests"`
	Attempts  int64            `json:"attempts"`
	Dedup     map[string]int64 `json:"dedup"`
	TurnRatio float64          `json:"turn_ratio"`
	UserTurns int64            `json:"user_turns"`
}

// Live returns the live panel's counts: of every tenant for tenant "",
// else of that tenant alone.
func (m *Metrics) Live(tenant string) Live {
	c := &m.all
	if tenant != "" {
		c = m.tenantCounts(tenant)
	}
	l := Live{Requests: c.requests.Load(), Attempts: c.attempts.Load(), Dedup: map[string]int64{}, TurnRatio: c.ratio(),
		UserTurns: c.userTurns.Load()}
	c.dedup.Range(func(k, v any) bool {
		l.Dedup[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return l
}

// tenantCounts are a tenant's live counts, made at its first use.
func (m *Metrics) tenantCounts(tenant string) *liveCounts {
	if c, ok := m.tenants.Load(tenant); ok {
		return c.(*liveCounts)
	}
	c, _ := m.tenants.LoadOrStore(tenant, new(liveCounts))
	return c.(*liveCounts)
}

// both applies f to the counts of every tenant and to tenant's own.
func (m *Metrics) both(tenant string, f func(c *liveCounts)) {
	f(&m.all)
	f(m.tenantCounts(tenant))
}

// New registers oncegate's collectors on reg; with a nil reg it makes its
// own registry.
func New(reg *prometheus.Registry) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	m := &Metrics{reg: reg}
	// The defaults, how many goroutines the process has started, and
	// what its heap objects and goroutine stacks occupy: the benchmark
	// reads them per request and per open stream (docs/performance.md).
	f(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.GoRuntimeMetricsRule{
		Matcher: regexp.MustCompile(`^(/sched/goroutines-created:goroutines|/memory/classes/heap/(objects|stacks):bytes)$`)})))
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "oncegate", Name: name, Help: help}, labels)
		f(c)
		return c
	}
	scalar := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "oncegate", Name: name, Help: help})
		f(c)
		return c
	}
	seconds := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
	m.logical = counter("logical_requests_total", "Logical requests by model alias and terminal.", "model", "terminal")
	m.attempts = counter("attempts_total", "Physical attempts by route, outcome class and kind.", "route", "class", "kind")
	m.perRequest = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "oncegate", Name: "attempts_per_logical_request",
		Help: "Physical attempts per logical request.", Buckets: []float64{0, 1, 2, 3, 4, 5, 6, 8, 10}})
	f(m.perRequest)
	m.dedup = counter("dedup_total", "Arrivals by identity outcome: miss (a new logical request), joined, replayed.", "result")
	m.clientRetries = scalar("client_retries_total", "Official-SDK retries (x-stainless-retry-count > 0) that reached the gateway.")
	m.ttft = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "oncegate", Name: "time_to_first_token_seconds",
		Help: "Time from an attempt's dispatch to its first byte, for attempts that produced output.", Buckets: seconds}, []string{"route"})
	f(m.ttft)
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "oncegate", Name: "request_duration_seconds",
		Help: "Logical request duration, from arrival to terminal.", Buckets: seconds}, []string{"model"})
	f(m.duration)
	m.resumes = counter("stream_resumes_total", "Continuation attempts after a stream broke after visible output.", "route")
	m.restarts = counter("stream_restarts_total", "Fresh generations after visible output, for clients that accept restart.", "provider", "cause")
	m.interrupted = counter("stream_interrupted_total", "Attempts whose stream broke after visible output.", "route")
	m.afterOutput = scalar("retries_after_visible_output_total", "Attempts after visible output other than a declared resume or restart; must stay 0.")
	m.deadline = scalar("deadline_exceeded_total", "Logical requests that ended at their deadline.")
	m.budgetRejections = scalar("retry_budget_rejections_total", "Logical requests stopped because the fleet retry budget was spent.")
	m.tenantRejections = counter("tenant_rejections_total", "Requests refused by a tenant limit.", "tenant", "code")
	m.adminActions = counter("admin_actions_total", "Actions taken through the admin API, by action (issue, update, revoke, rotate).", "action")
	m.hedges = counter("hedges_total", "Hedged attempts by which of the pair won.", "winner")
	m.selected = counter("route_selected_total", "Attempts dispatched to a route, by alias, route and the alias's strategy.", "alias", "route", "strategy")
	m.billable = counter("billable_tokens_total", "Tokens charged, by tenant, route and type (input, output).", "tenant", "route", "type")
	m.cost = counter("cost_usd_total", "USD charged, by tenant and route.", "tenant", "route")
	m.errorResponses = counter("error_responses_total", "Answers that were a gateway error, by code and status: refusals (401, 400, 404, 413, 429, an open circuit, a budget) and failures.", "code", "status")
	m.auxRequests = counter("auxiliary_requests_total", "Requests that ask a provider outside a logical request (no receipt: operation count_tokens), by how they were answered (provider, estimate).", "operation", "source")
	m.auxAttempts = counter("auxiliary_attempts_total", "Provider calls outside logical requests, by operation, route and outcome kind (ok, a failure's kind, or circuit_open: not sent).", "operation", "route", "kind")
	m.turns = counter("turns_total", "Conversation turns committed, by role (user, assistant); a turn's user message counts when it is written, its answer when it is done.", "role")
	m.orphans = scalar("orphaned_turns_total", "Generations an upstream committed for a turn besides the one the conversation kept.")
	m.branches = scalar("conversation_branches_total", "Turns that continue a response another turn already continued (a regenerated answer, an edited question).")
	m.turnRatio = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "oncegate", Name: "turn_ratio",
		Help: "Assistant turns ÷ user turns this process wrote: 1.0 when every turn got one answer, below when some failed, never above."},
		m.all.ratio)
	f(m.turnRatio)
	m.budgetRatio = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "oncegate", Name: "budget_used_ratio",
		Help: "Spend ÷ ceiling of each cost budget that is set, by scope (tenant, key), id and period (day, month, total); 1 is the ceiling."},
		[]string{"scope", "id", "period"})
	f(m.budgetRatio)
	m.budgetAlerts = counter("budget_alerts_total", "Budget alert events by result: sent (the webhook took it), failed (every try failed) or dropped (the queue was full).", "result")
	return m
}

// SetBudgetRatio sets the gauge of one budget: spend ÷ ceiling.
func (m *Metrics) SetBudgetRatio(scope, id, period string, ratio float64) {
	m.budgetRatio.WithLabelValues(scope, id, period).Set(ratio)
}

// ObserveBudgetAlert counts one budget alert event by result.
func (m *Metrics) ObserveBudgetAlert(result string) {
	m.budgetAlerts.WithLabelValues(result).Inc()
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Request is what one logical request contributes.
type Request struct {
	Tenant, Model, Terminal, Reason string
	Attempts                        int
	Duration                        time.Duration
}

// ObserveRequest counts a finished logical request.
func (m *Metrics) ObserveRequest(r Request) {
	m.logical.WithLabelValues(r.Model, r.Terminal).Inc()
	m.perRequest.Observe(float64(r.Attempts))
	m.both(r.Tenant, func(c *liveCounts) {
		c.requests.Add(1)
		c.attempts.Add(int64(r.Attempts))
	})
	m.duration.WithLabelValues(r.Model).Observe(r.Duration.Seconds())
	switch {
	case r.Terminal == "deadline":
		m.deadline.Inc()
	case r.Reason == "retry_budget":
		m.budgetRejections.Inc()
	}
}

// Attempt is what one physical attempt contributes.
type Attempt struct {
	Tenant, Route, Provider, Class, Kind, Purpose string
	// AfterOutput: an earlier attempt of the request had visible output.
	AfterOutput bool
	// Cause is the previous attempt's kind, for restarts.
	Cause         string
	VisibleOutput bool
	TTFT          time.Duration // 0: no first byte
	Input, Output int64
	CostUSD       float64
}

// ObserveAttempt counts one attempt.
func (m *Metrics) ObserveAttempt(a Attempt) {
	m.attempts.WithLabelValues(a.Route, a.Class, a.Kind).Inc()
	switch a.Purpose {
	case "resume":
		m.resumes.WithLabelValues(a.Route).Inc()
	case "restart":
		m.restarts.WithLabelValues(a.Provider, a.Cause).Inc()
	default:
		if a.AfterOutput {
			m.afterOutput.Inc()
		}
	}
	if a.Kind == "stream_interrupted_after_output" {
		m.interrupted.WithLabelValues(a.Route).Inc()
	}
	if a.VisibleOutput && a.TTFT > 0 {
		m.ttft.WithLabelValues(a.Route).Observe(a.TTFT.Seconds())
	}
	if a.Input > 0 {
		m.billable.WithLabelValues(a.Tenant, a.Route, "input").Add(float64(a.Input))
	}
	if a.Output > 0 {
		m.billable.WithLabelValues(a.Tenant, a.Route, "output").Add(float64(a.Output))
	}
	if a.CostUSD > 0 {
		m.cost.WithLabelValues(a.Tenant, a.Route).Add(a.CostUSD)
	}
}

// ObserveErrorResponse counts an answer that was a gateway error.
func (m *Metrics) ObserveErrorResponse(code string, status int) {
	m.errorResponses.WithLabelValues(code, strconv.Itoa(status)).Inc()
}

// ObserveAuxiliaryRequest counts a request answered outside the logical
// request model (a token count), by its source: "provider" or "estimate".
func (m *Metrics) ObserveAuxiliaryRequest(operation, source string) {
	m.auxRequests.WithLabelValues(operation, source).Inc()
}

// ObserveAuxiliaryAttempt counts a provider call made outside a logical
// request, by its outcome kind ("circuit_open": the breaker kept it back).
func (m *Metrics) ObserveAuxiliaryAttempt(operation, route, kind string) {
	m.auxAttempts.WithLabelValues(operation, route, kind).Inc()
}

// ObserveTurn counts a conversation turn of tenant's by role: "user" when
// a turn is written (before dispatch), "assistant" when its answer is
// committed.
func (m *Metrics) ObserveTurn(tenant, role string) {
	m.turns.WithLabelValues(role).Inc()
	m.both(tenant, func(c *liveCounts) {
		if role == "user" {
			c.userTurns.Add(1)
		} else {
			c.assistantTurns.Add(1)
		}
	})
}

// ObserveOrphan counts an orphaned generation.
func (m *Metrics) ObserveOrphan() { m.orphans.Inc() }

// ObserveBranch counts a turn begun on a response that another turn
// already continued: a second branch of its conversation.
func (m *Metrics) ObserveBranch() { m.branches.Inc() }

// ratio is assistant turns ÷ user turns: at most 1 (turns that failed
// hold it below); above 1, something wrote answers nobody asked for.
func (c *liveCounts) ratio() float64 {
	u := c.userTurns.Load()
	if u == 0 {
		return 1
	}
	return float64(c.assistantTurns.Load()) / float64(u)
}

// ObserveHedge counts a hedged pair by its winner: "primary", "hedge" or
// "neither".
func (m *Metrics) ObserveHedge(winner string) { m.hedges.WithLabelValues(winner).Inc() }

// ObserveRouteSelected counts an attempt dispatched to route of alias,
// chosen by strategy.
func (m *Metrics) ObserveRouteSelected(alias, route, strategy string) {
	m.selected.WithLabelValues(alias, route, strategy).Inc()
}

// RouteLoad is a source of every route's attempts in flight in this
// process, read at each scrape: it calls f for each route.
type RouteLoad func(f func(route string, inFlight int))

// RegisterRouteLoad exports oncegate_route_inflight{route} from src.
func (m *Metrics) RegisterRouteLoad(src RouteLoad) {
	m.reg.MustRegister(&routeLoadCollector{src: src})
}

var routeInflightDesc = prometheus.NewDesc("oncegate_route_inflight", "Attempts in flight per route, in this process.", []string{"route"}, nil)

type routeLoadCollector struct{ src RouteLoad }

func (c *routeLoadCollector) Describe(ch chan<- *prometheus.Desc) { ch <- routeInflightDesc }

func (c *routeLoadCollector) Collect(ch chan<- prometheus.Metric) {
	c.src(func(route string, n int) {
		ch <- prometheus.MustNewConstMetric(routeInflightDesc, prometheus.GaugeValue, float64(n), route)
	})
}

// RegisterLedgerRefused exports oncegate_ledger_refused_writes: the writes
// the ledger acknowledged and its database then refused, since the process
// opened it (read at each scrape from refused).
func (m *Metrics) RegisterLedgerRefused(refused func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "oncegate_ledger_refused_writes",
		Help: "Writes the ledger acknowledged and its database then refused, set aside in its meta table (docs/durability.md); always 0 unless there is a bug."},
		func() float64 { return float64(refused()) }))
}

// ObserveDedup counts one arrival of tenant's: "miss", "joined" or
// "replayed".
func (m *Metrics) ObserveDedup(tenant, result string) {
	m.dedup.WithLabelValues(result).Inc()
	m.both(tenant, func(c *liveCounts) {
		n, _ := c.dedup.LoadOrStore(result, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	})
}

// ObserveClientRetry counts an arrival that was an official SDK's retry.
func (m *Metrics) ObserveClientRetry() { m.clientRetries.Inc() }

// ObserveTenantRejection counts a request a tenant limit refused, by the
// error code it got.
func (m *Metrics) ObserveTenantRejection(tenant, code string) {
	m.tenantRejections.WithLabelValues(tenant, code).Inc()
}

// ObserveAdminAction counts an action taken through the admin API.
func (m *Metrics) ObserveAdminAction(action string) {
	m.adminActions.WithLabelValues(action).Inc()
}

// BreakerStates is a source of every route's breaker state, read at each
// scrape: it calls f for each route.
type BreakerStates func(f func(route string, state int, generation int64))

// RegisterBreakers exports oncegate_breaker_state{route} (0 closed, 1
// half-open, 2 open) and oncegate_breaker_generation{route} from src.
func (m *Metrics) RegisterBreakers(src BreakerStates) {
	m.reg.MustRegister(&breakerCollector{src: src})
}

var (
	breakerStateDesc = prometheus.NewDesc("oncegate_breaker_state", "Circuit breaker state per route: 0 closed, 1 half-open, 2 open.", []string{"route"}, nil)
	breakerGenDesc   = prometheus.NewDesc("oncegate_breaker_generation", "Circuit breaker generation per route: it grows at every state change.", []string{"route"}, nil)
)

type breakerCollector struct{ src BreakerStates }

func (c *breakerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- breakerStateDesc
	ch <- breakerGenDesc
}

func (c *breakerCollector) Collect(ch chan<- prometheus.Metric) {
	c.src(func(route string, state int, gen int64) {
		ch <- prometheus.MustNewConstMetric(breakerStateDesc, prometheus.GaugeValue, float64(state), route)
		ch <- prometheus.MustNewConstMetric(breakerGenDesc, prometheus.GaugeValue, float64(gen), route)
	})
}
