// Package receipt defines the one record kept per logical request (
// docs/receipts.md): every physical attempt with its timing, outcome, usage and cost, the
// engine's decisions and the terminal, sealed with SHA-256 digests over its
// canonical JSON. Verify re-runs the retry engine over a receipt and reports
// every drift.
package receipt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/identity"
	"github.com/oncegate/oncegate/internal/retry"
)

// RetryOwner is the only retry owner a valid receipt names: the gateway's
// engine (docs/architecture.md, "single retry owner").
const RetryOwner = "oncegate"

// Receipt is the record of one logical request. Field names are the
// external contract.
type Receipt struct {
	RequestID string `json:"request_id"`
	Tenant    string `json:"tenant"`
	Operation string `json:"operation"`
	Model     string `json:"model"`
	// KeyID is the virtual key the request used (docs/keys-and-teams.md); empty
	// for a tenant's key from the configuration.
	KeyID string `json:"key_id,omitempty"`
	// KeyName is the virtual key's name when the request was made (a
	// later rename does not change it), for the spend report.
	KeyName string `json:"key_name,omitempty"`
	// User is the end user the client named: OpenAI's user (or
	// safety_identifier), Anthropic's metadata.user_id (docs/spend.md).
	User string `json:"user,omitempty"`
	// Tags are the request's chargeback tags, from X-Oncegate-Tags and
	// the body's metadata.tags, deduplicated in the order first seen.
	Tags             []string  `json:"tags,omitempty"`
	KeySHA256        string    `json:"key_sha256"`
	Fingerprint      string    `json:"fingerprint,omitempty"`
	RequestSHA256    string    `json:"request_sha256"`
	PolicySHA256     string    `json:"policy_sha256"`
	RetryOwner       string    `json:"retry_owner"`
	CreatedAt        time.Time `json:"created_at"`
	Deadline         time.Time `json:"deadline"`
	Stream           bool      `json:"stream"`
	ClientRetryCount int       `json:"client_retry_count"`
	Dedup            Dedup     `json:"dedup"`
	Request          Facts     `json:"request"`
	// Conversation is set for a turn of a stored conversation
	// (/v1/responses).
	Conversation   *Conversation `json:"conversation,omitempty"`
	Attempts       []Attempt     `json:"attempts"`
	Decisions      []Decision    `json:"decisions"`
	Terminal       string        `json:"terminal"`
	Reason         string        `json:"reason"`
	Totals         Totals        `json:"totals"`
	AttemptsSHA256 string        `json:"attempts_sha256"`
	ReceiptSHA256  string        `json:"receipt_sha256,omitempty"`
}

// Conversation places a logical request in its conversation: the turn it
// is a try of, and the conversation's turn counts once it ended (every
// earlier turn is committed, so they are equal: assistant ÷ user = 1).
type Conversation struct {
	ID                 string `json:"id"`
	ResponseID         string `json:"response_id"`
	PreviousResponseID string `json:"previous_response_id,omitempty"`
	Turn               int    `json:"turn"`
	Try                int    `json:"try"`
	UserTurns          int    `json:"user_turns"`
	AssistantTurns     int    `json:"assistant_turns"`
}

// Dedup counts how many other arrivals this logical request answered.
type Dedup struct {
	Joined   int `json:"joined"`
	Replayed int `json:"replayed"`
}

// Facts are the request properties the engine decided on, recorded so that
// verification can replay it.
type Facts struct {
	EstimatedInputTokens int64  `json:"estimated_input_tokens"`
	MaxOutputTokens      int64  `json:"max_output_tokens"`
	MaxDataBoundary      string `json:"max_data_boundary"`
	AcceptRestart        bool   `json:"accept_restart"`
	NoContinuation       bool   `json:"no_continuation,omitempty"`
	// Choices is how many answers the client asked for (OpenAI's n),
	// when more than one.
	Choices int `json:"choices,omitempty"`
	// Stateful: the operation writes provider-side state (a turn on an
	// openai-responses route): never hedged.
	Stateful         bool              `json:"stateful,omitempty"`
	IneligibleRoutes map[string]string `json:"ineligible_routes"`
	// DroppableFields are the request's fields a route of the other
	// protocol may drop (the alias's may_drop, X-Oncegate-May-Drop);
	// each attempt that dropped them says so (Attempt.DroppedFields).
	DroppableFields []string `json:"droppable_fields,omitempty"`
}

// Attempt is one physical attempt.
type Attempt struct {
	Ordinal          int           `json:"ordinal"`
	Route            string        `json:"route"`
	RouteOrdinal     int           `json:"route_ordinal"`
	Provider         string        `json:"provider"`
	UpstreamModel    string        `json:"upstream_model"`
	Release          string        `json:"release"`
	DataBoundary     string        `json:"data_boundary"`
	Purpose          string        `json:"purpose"`
	RequestSHA256    string        `json:"request_sha256"`
	NotBefore        time.Time     `json:"not_before"`
	StartedAt        time.Time     `json:"started_at"`
	FirstByteAt      *time.Time    `json:"first_byte_at,omitempty"`
	ObservedAt       time.Time     `json:"observed_at"`
	JitterMS         int64         `json:"jitter_ms"`
	OutcomeClass     string        `json:"outcome_class"`
	Kind             string        `json:"kind"`
	Cause            string        `json:"cause,omitempty"`
	HTTPStatus       int           `json:"http_status"`
	RetryAfterMS     *int64        `json:"retry_after_ms,omitempty"`
	VisibleOutput    bool          `json:"visible_output"`
	EmittedTokens    int64         `json:"emitted_tokens"`
	InToolCall       bool          `json:"in_tool_call,omitempty"`
	ProtocolWarnings int           `json:"protocol_warnings"`
	Usage            gw.Usage      `json:"usage"`
	UsageEstimated   bool          `json:"usage_estimated,omitempty"`
	CostUSD          float64       `json:"cost_usd"`
	ReservedUSD      float64       `json:"reserved_usd"`
	Breaker          BreakerState  `json:"breaker"`
	Error            *AttemptError `json:"error,omitempty"`
	// Reconciled is set on an attempt at a stateful route whose reply was
	// lost: "found" (the upstream had committed the answer, which was
	// adopted), "absent" (it had not: the attempt may be retried) or
	// "unknown" (it could not be told). Orphans counts the extra copies of
	// the turn the upstream held, removed and recorded with their cost;
	// OrphansCostUSD is what they cost, charged to the tenant apart from
	// this receipt's totals (the orphans are a conversation's record).
	Reconciled     string  `json:"reconciled,omitempty"`
	Orphans        int     `json:"orphans,omitempty"`
	OrphansCostUSD float64 `json:"orphans_cost_usd,omitempty"`
	// DroppedFields are the request's fields this attempt's route did not
	// carry (docs/translation.md).
	DroppedFields []string `json:"dropped_fields,omitempty"`
}

// BreakerState is the route's breaker when the attempt was admitted.
type BreakerState struct {
	State      string `json:"state"`
	Generation int64  `json:"generation"`
}

// AttemptError is the sanitised provider or transport error of an attempt.
type AttemptError struct {
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
}

// Decision is one engine decision: after_attempt 0 is the start.
type Decision struct {
	AfterAttempt     int        `json:"after_attempt"`
	Action           string     `json:"action"`
	Route            string     `json:"route,omitempty"`
	NotBefore        *time.Time `json:"not_before,omitempty"`
	JitterMS         int64      `json:"jitter_ms,omitempty"`
	ReserveUSD       float64    `json:"reserve_usd,omitempty"`
	Terminal         string     `json:"terminal,omitempty"`
	Reason           string     `json:"reason,omitempty"`
	BreakerRefused   []string   `json:"breaker_refused,omitempty"`
	RetryBudgetSpent bool       `json:"retry_budget_spent,omitempty"`
	// RetryBudgetRefused names the providers whose retry budget was spent
	// when the decision was taken.
	RetryBudgetRefused []string `json:"retry_budget_refused,omitempty"`
	// Figures are what a tier's strategy chose by, per route, when the
	// decision was taken (docs/routing.md): the input verify replays the
	// choice from.
	Figures map[string]RouteFigures `json:"figures,omitempty"`
	// Cooling names the routes that cooled down when the decision was
	// taken — a provider's long rate-limit hint, seen by any replica — and
	// until when (docs/retries.md): the input verify replays the skip from.
	Cooling map[string]time.Time `json:"cooling,omitempty"`
	// TenantAllowanceUSD is what the tenant could still reserve today when
	// the decision was taken; absent when the tenant has no ceiling.
	TenantAllowanceUSD *float64 `json:"tenant_allowance_usd,omitempty"`
	// By names who took a decision other than the engine: "recovery",
	// which stops a request whose gateway died (docs/identity.md). Only a
	// last decision, a stop, may carry it; absent for the engine's own.
	By string `json:"by,omitempty"`
}

// RouteFigures are one route's figures as a decision saw them.
type RouteFigures struct {
	InFlight int     `json:"in_flight"`
	TTFTMS   int64   `json:"ttft_ms"`
	Headroom float64 `json:"headroom"`
}

// ByRecovery marks a decision recovery took (Decision.By).
const ByRecovery = "recovery"

// Totals sum the attempts.
type Totals struct {
	Attempts       int      `json:"attempts"`
	Providers      []string `json:"providers"`
	BillableTokens int64    `json:"billable_tokens"`
	CostUSD        float64  `json:"cost_usd"`
}

// NewDecision records an engine decision taken after attempt `after`
// under the given admission snapshot.
func NewDecision(after int, d retry.Decision, adm retry.Admission) Decision {
	rd := Decision{AfterAttempt: after, Action: string(d.Action), RetryBudgetSpent: adm.RetryBudgetSpent}
	if adm.TenantCapped {
		usd := adm.TenantAllowance.USD()
		rd.TenantAllowanceUSD = &usd
	}
	for id, refused := range adm.Refused {
		if refused {
			rd.BreakerRefused = append(rd.BreakerRefused, id)
		}
	}
	slices.Sort(rd.BreakerRefused)
	for route, f := range adm.Figures {
		if rd.Figures == nil {
			rd.Figures = map[string]RouteFigures{}
		}
		rd.Figures[route] = RouteFigures{InFlight: f.InFlight, TTFTMS: f.TTFT.Milliseconds(), Headroom: f.Headroom}
	}
	for route, until := range adm.Cooling {
		if rd.Cooling == nil {
			rd.Cooling = map[string]time.Time{}
		}
		rd.Cooling[route] = until.UTC()
	}
	for provider, refused := range adm.RetryRefused {
		if refused {
			rd.RetryBudgetRefused = append(rd.RetryBudgetRefused, provider)
		}
	}
	slices.Sort(rd.RetryBudgetRefused)
	if d.Dispatches() {
		nb := d.NotBefore.UTC()
		rd.Route, rd.NotBefore, rd.JitterMS, rd.ReserveUSD = d.Route, &nb, d.JitterMS, d.Reserve.USD()
	} else {
		rd.Terminal, rd.Reason = string(d.Terminal), string(d.Reason)
	}
	return rd
}

// Admission is the admission snapshot a decision was taken under.
func (d Decision) Admission() retry.Admission {
	adm := retry.Admission{RetryBudgetSpent: d.RetryBudgetSpent}
	if d.TenantAllowanceUSD != nil {
		adm.TenantCapped, adm.TenantAllowance = true, gw.NanoFromUSD(*d.TenantAllowanceUSD)
	}
	if len(d.BreakerRefused) > 0 {
		adm.Refused = map[string]bool{}
		for _, id := range d.BreakerRefused {
			adm.Refused[id] = true
		}
	}
	for route, f := range d.Figures {
		if adm.Figures == nil {
			adm.Figures = map[string]retry.Figures{}
		}
		adm.Figures[route] = retry.Figures{InFlight: f.InFlight, TTFT: time.Duration(f.TTFTMS) * time.Millisecond, Headroom: f.Headroom}
	}
	for route, until := range d.Cooling {
		if adm.Cooling == nil {
			adm.Cooling = map[string]time.Time{}
		}
		adm.Cooling[route] = until
	}
	if len(d.RetryBudgetRefused) > 0 {
		adm.RetryRefused = map[string]bool{}
		for _, provider := range d.RetryBudgetRefused {
			adm.RetryRefused[provider] = true
		}
	}
	return adm
}

// Engine converts a recorded attempt to the engine's view.
func (a *Attempt) Engine() retry.Attempt {
	ea := retry.Attempt{Ordinal: a.Ordinal, Route: a.Route, Purpose: retry.Purpose(a.Purpose),
		NotBefore: a.NotBefore, StartedAt: a.StartedAt, ObservedAt: a.ObservedAt, JitterMS: a.JitterMS,
		Kind: gw.Kind(a.Kind), Cause: gw.Cause(a.Cause), VisibleOutput: a.VisibleOutput,
		EmittedTokens: a.EmittedTokens, InToolCall: a.InToolCall, Cost: gw.NanoFromUSD(a.CostUSD)}
	if a.RetryAfterMS != nil {
		ea.HasRetryAfter, ea.RetryAfter = true, time.Duration(*a.RetryAfterMS)*time.Millisecond
	}
	return ea
}

// EngineRequest rebuilds the engine's view of the request from the facts.
func (r *Receipt) EngineRequest() *retry.Request {
	return &retry.Request{ID: r.RequestID, Deadline: r.Deadline, InputTokens: r.Request.EstimatedInputTokens,
		MaxOutputTokens: r.Request.MaxOutputTokens, AcceptRestart: r.Request.AcceptRestart, NoContinuation: r.Request.NoContinuation,
		Choices: r.Request.Choices, Stateful: r.Request.Stateful, Ineligible: r.Request.IneligibleRoutes}
}

// ComputeTotals sums the attempts.
func (r *Receipt) ComputeTotals() Totals {
	t := Totals{Attempts: len(r.Attempts), Providers: []string{}}
	var cost gw.NanoUSD
	for i := range r.Attempts {
		a := &r.Attempts[i]
		t.BillableTokens += a.Usage.Billable()
		cost += gw.NanoFromUSD(a.CostUSD)
		if !slices.Contains(t.Providers, a.Provider) {
			t.Providers = append(t.Providers, a.Provider)
		}
	}
	t.CostUSD = cost.USD()
	return t
}

// Seal computes the totals and both digests. Call it whenever the receipt
// changes (a new attempt, the terminal, a later join or replay).
func (r *Receipt) Seal() error {
	if r.Attempts == nil {
		r.Attempts = []Attempt{}
	}
	if r.Decisions == nil {
		r.Decisions = []Decision{}
	}
	if r.Request.IneligibleRoutes == nil {
		r.Request.IneligibleRoutes = map[string]string{}
	}
	r.Totals = r.ComputeTotals()
	var err error
	if r.AttemptsSHA256, err = r.attemptsDigest(); err != nil {
		return err
	}
	r.ReceiptSHA256, err = r.receiptDigest()
	return err
}

func (r *Receipt) attemptsDigest() (string, error) {
	d, err := identity.CanonicalSHA256(r.Attempts)
	if err != nil {
		return "", fmt.Errorf("digest attempts: %w", err)
	}
	return d, nil
}

// receiptDigest covers everything but receipt_sha256 itself.
func (r *Receipt) receiptDigest() (string, error) {
	c := *r
	c.ReceiptSHA256 = ""
	d, err := identity.CanonicalSHA256(&c)
	if err != nil {
		return "", fmt.Errorf("digest receipt: %w", err)
	}
	return d, nil
}

// Canonical is the receipt's canonical JSON (RFC 8785).
func (r *Receipt) Canonical() ([]byte, error) { return identity.MarshalCanonical(r) }

// Indented is the canonical JSON, indented for people.
func (r *Receipt) Indented() ([]byte, error) {
	c, err := r.Canonical()
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, c, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// Parse strictly decodes a receipt: unknown fields are errors.
func Parse(data []byte) (*Receipt, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r Receipt
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("parse receipt: %w", err)
	}
	return &r, nil
}
