package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	oopt2 "github.com/openai/openai-go/v3/option"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/alerts"
	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/mock"
)

// spenderBudget is the testConfig's line of the tenant "spender", whose
// budget the tests below replace.
const spenderBudget = `{id: spender, api_key_env: KEY_SPENDER, budget: {cost_usd_per_day: 0.05}}`

// withSpender is testConfig with spender's budget replaced.
func withSpender(t *testing.T, budget string) string {
	t.Helper()
	if !strings.Contains(testConfig, spenderBudget) {
		t.Fatal("testConfig no longer has spender's budget")
	}
	return strings.Replace(testConfig, spenderBudget, `{id: spender, api_key_env: KEY_SPENDER, budget: `+budget+`}`, 1)
}

// apiMessage is an SDK error's message ("" for another error).
func apiMessage(err error) string {
	var ae *openai.Error
	if errors.As(err, &ae) {
		return ae.Message
	}
	return ""
}

// spendUntilRefused sends requests with cl until one is refused and
// returns how many were answered and that refusal.
func spendUntilRefused(t *testing.T, cl openai.Client, text string) (int, error) {
	t.Helper()
	p := oaParams("chat", text)
	p.MaxTokens = openai.Int(100)
	for i := range 100 {
		p.Messages = userMsg(text + " " + strconv.Itoa(i))
		if _, err := cl.Chat.Completions.New(context.Background(), p); err != nil {
			return i, err
		}
	}
	t.Fatal("100 requests and no refusal")
	return 0, nil
}

// A key's lifetime budget: once its spend leaves no room for the next
// attempt's worst case it is refused — 429 key_budget_exceeded,
// x-should-retry false and no Retry-After, as the lifetime never ends —
// and the provider sees no further call, before and after a restart
// (the store's spend seeds it). The admin API shows the lifetime spend.
func TestKeyLifetimeBudgetRefusesOnceSpent(t *testing.T) {
	e := newEnv(t, mock.Config{Tokens: 24})
	// Each request's worst case: ~10 prompt + 100 output tokens at
	// $2/Mtok ≈ $0.00022; it costs ~$0.00006.
	v := e.issue(`{"tenant":"acme","budget":{"cost_usd_total":0.0005}}`)
	var h http.Header
	cl := e.openai(&h, oopt2.WithAPIKey(v.Key))
	before := e.primary.Stats().Requests
	served, err := spendUntilRefused(t, cl, "lifetime")
	st, code, _ := apiErrorOf(t, err)
	if st != 429 || code != api.CodeKeyBudget || h.Get("x-should-retry") != "false" || h.Get("Retry-After") != "" || served == 0 {
		t.Fatalf("over the lifetime after %d: %d %s, x-should-retry %q, Retry-After %q", served, st, code, h.Get("x-should-retry"), h.Get("Retry-After"))
	}
	if m := apiMessage(err); !strings.Contains(m, "lifetime cost limit") || !strings.Contains(m, "never resets") {
		t.Fatalf("the refusal does not say the lifetime never resets: %v", err)
	}
	sent := e.primary.Stats().Requests - before
	if sent != int64(served) {
		t.Fatalf("the provider saw %d calls for %d answers", sent, served)
	}
	e.restart()
	cl = e.openai(&h, oopt2.WithAPIKey(v.Key))
	_, err = cl.Chat.Completions.New(context.Background(), oaParams("chat", "after the restart"))
	if st, code, _ := apiErrorOf(t, err); st != 429 || code != api.CodeKeyBudget {
		t.Fatalf("after a restart: %d %s (the lifetime's spend was forgotten)", st, code)
	}
	if n := e.primary.Stats().Requests - before; n != sent {
		t.Fatalf("after the refusals the provider saw %d more calls", n-sent)
	}
	var got admin.KeyView
	e.adminDo(keyAdmin, "GET", "/admin/keys/"+v.ID, "", &got)
	if got.Spend == nil || got.Spend.TotalUSD <= 0 || got.Spend.TotalUSD > 0.0005 || got.Spend.TotalUSD != got.Spend.TodayUSD {
		t.Fatalf("the key's lifetime spend: %+v", got.Spend)
	}
	from, to := ledger.SpanTotal.Days(0)
	spend, _ := e.store.KeySpend(context.Background(), from, to)
	if math.Abs(gw.NanoUSD(spend[v.ID]).USD()-got.Spend.TotalUSD) > 1e-9 {
		t.Fatalf("the admin API's total %g, the store's %d nano-USD", got.Spend.TotalUSD, spend[v.ID])
	}
}

// A file tenant's month: refused with 429 tenant_budget_exceeded and a
// Retry-After of the seconds to the 1st of next month, 00:00 UTC; the
// month's and the lifetime's spend survive a restart; the next month
// serves again until the lifetime is spent, which has no Retry-After.
func TestTenantMonthAndLifetimeBudgets(t *testing.T) {
	clk := new(clock.Offset)
	target := time.Date(2026, 12, 31, 20, 0, 0, 0, time.UTC)
	clk.Advance(time.Until(target))
	e := newEnvOpts(t, envOptions{mock: mock.Config{Tokens: 24}, clock: clk,
		config: withSpender(t, `{cost_usd_per_month: 0.0005, cost_usd_total: 0.0009}`)})
	var h http.Header
	cl := e.openai(&h, oopt2.WithAPIKey(keySpender))
	calls := e.primary.Stats().Requests
	first := clk.Now()
	served, err := spendUntilRefused(t, cl, "december")
	last := clk.Now()
	st, code, _ := apiErrorOf(t, err)
	if st != 429 || code != api.CodeTenantBudget || h.Get("x-should-retry") != "false" || served == 0 {
		t.Fatalf("over the month after %d: %d %s %v", served, st, code, h)
	}
	if !strings.Contains(apiMessage(err), "monthly cost ceiling") {
		t.Fatalf("the refusal does not name the month: %v", err)
	}
	newYear := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	ra, _ := strconv.Atoi(h.Get("Retry-After"))
	if lo, hi := int(math.Ceil(newYear.Sub(last).Seconds())), int(math.Ceil(newYear.Sub(first).Seconds())); ra < lo || ra > hi {
		t.Fatalf("Retry-After %d, want the seconds to the 1st of January, in [%d, %d]", ra, lo, hi)
	}
	sent := e.primary.Stats().Requests - calls
	e.restart()
	cl = e.openai(&h, oopt2.WithAPIKey(keySpender))
	if _, err := cl.Chat.Completions.New(context.Background(), oaParams("chat", "december again")); err == nil {
		t.Fatal("after a restart the month's spend was forgotten")
	} else if st, code, _ := apiErrorOf(t, err); st != 429 || code != api.CodeTenantBudget {
		t.Fatalf("after a restart: %d %s", st, code)
	}
	if n := e.primary.Stats().Requests - calls; n != sent {
		t.Fatalf("the provider saw %d calls after the month was spent", n-sent)
	}
	clk.Advance(newYear.Sub(clk.Now()) + time.Hour) // January: a new month, the same lifetime
	e.restart()
	cl = e.openai(&h, oopt2.WithAPIKey(keySpender))
	servedJan, err := spendUntilRefused(t, cl, "january")
	st, code, _ = apiErrorOf(t, err)
	if st != 429 || code != api.CodeTenantBudget || h.Get("Retry-After") != "" || !strings.Contains(apiMessage(err), "lifetime cost ceiling") {
		t.Fatalf("over the lifetime in January: %d %s, Retry-After %q: %v", st, code, h.Get("Retry-After"), err)
	}
	// January alone left room for another attempt's worst case
	// (≈ $0.00022): only December's spend, remembered, refuses it.
	ctx := context.Background()
	dec, _ := e.store.TenantSpend(ctx, gw.Day(target), gw.Day(target))
	jan, _ := e.store.TenantSpend(ctx, gw.Day(newYear), gw.Day(newYear))
	if servedJan == 0 || dec["spender"] <= 0 || jan["spender"]+int64(gw.NanoFromUSD(0.0003)) > int64(gw.NanoFromUSD(0.0009)) {
		t.Fatalf("January served %d (spent %d nano-USD, December %d): the lifetime forgot December", servedJan, jan["spender"], dec["spender"])
	}
	if v := gw.NanoUSD(dec["spender"] + jan["spender"]); v > gw.NanoFromUSD(0.0009) {
		t.Fatalf("the lifetime's spend %v passed its ceiling", v.USD())
	}
}

// webhookSink is a budget webhook that keeps the events it received
// with a valid signature; fail says how to answer the nth try of an
// event (nil: 200).
type webhookSink struct {
	t      *testing.T
	secret []byte
	fail   func(id string, try int) int
	mu     sync.Mutex
	tries  map[string]int
	got    chan alerts.Event
}

func newWebhookSink(t *testing.T, secret string, fail func(string, int) int) (*webhookSink, string) {
	s := &webhookSink{t: t, secret: []byte(secret), fail: fail, tries: map[string]int{}, got: make(chan alerts.Event, 64)}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	return s, srv.URL + "/hook"
}

func (s *webhookSink) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if !alerts.Verify(s.secret, body, r.Header.Get(alerts.SignatureHeader)) {
		s.t.Errorf("an event with a bad signature %q: %s", r.Header.Get(alerts.SignatureHeader), body)
		w.WriteHeader(400)
		return
	}
	var ev alerts.Event
	if err := json.Unmarshal(body, &ev); err != nil {
		s.t.Errorf("an event that is not JSON: %s", body)
		return
	}
	s.mu.Lock()
	s.tries[ev.ID]++
	try := s.tries[ev.ID]
	s.mu.Unlock()
	if s.fail != nil {
		if st := s.fail(ev.ID, try); st != 200 {
			w.WriteHeader(st)
			return
		}
	}
	s.got <- ev
}

// next waits for the next event delivered.
func (s *webhookSink) next() alerts.Event {
	s.t.Helper()
	select {
	case ev := <-s.got:
		return ev
	case <-time.After(30 * time.Second):
		s.t.Fatal("no budget event arrived")
		return alerts.Event{}
	}
}

const webhookSecret = "whsec-test-0123456789"

// webhookYAML configures the budget webhook at url.
func webhookYAML(url string) string {
	return "alerts: {budget_webhook: {url: \"" + url + "\", secret_env: KEY_WEBHOOK}}\n"
}

// The budget gauge and webhook: a tenant's month crosses 80 % (its
// charges) and then 100 % (it refuses a request); the gauge reads the
// month's spend over its ceiling; the webhook receives exactly one
// signed event for each — more refusals, and a restart, send none again
// (the next event to arrive is another budget's).
func TestBudgetGaugeAndWebhookEvents(t *testing.T) {
	sink, url := newWebhookSink(t, webhookSecret, nil)
	// ~15 prompt + 90 output tokens ≈ $0.000195 a request, reserved at
	// ≈ $0.000215: the fifth passes 80 % of $0.001, the sixth is refused.
	e := newEnvOpts(t, envOptions{mock: mock.Config{Tokens: 90}, yaml: webhookYAML(url),
		config: withSpender(t, `{cost_usd_per_month: 0.001}`)})
	cl := e.openai(nil, oopt2.WithAPIKey(keySpender))
	served, err := spendUntilRefused(t, cl, "gauge")
	if st, code, _ := apiErrorOf(t, err); st != 429 || code != api.CodeTenantBudget {
		t.Fatalf("over the month after %d: %d %s", served, st, code)
	}
	for _, want := range []float64{0.8, 1} {
		ev := sink.next()
		if ev.Scope != "tenant" || ev.Subject != "spender" || ev.Period != "month" || ev.Threshold != want || ev.CeilingUSD != 0.001 ||
			ev.Type != "budget.threshold_crossed" || !strings.HasSuffix(ev.PeriodStart, "-01T00:00:00Z") || ev.ID == "" {
			t.Fatalf("event %+v, want the tenant's month at %g", ev, want)
		}
	}
	now := time.Now()
	month, _ := e.store.TenantSpend(context.Background(), ledger.MonthStart(now), gw.Day(now))
	want := float64(month["spender"]) / float64(gw.NanoFromUSD(0.001))
	if got := e.metricValue(`oncegate_budget_used_ratio{id="spender",period="month",scope="tenant"}`); math.Abs(got-want) > 1e-9 || got < 0.8 {
		t.Fatalf("the gauge %g, want the month's spend over its ceiling, %g", got, want)
	}
	if strings.Contains(string(e.metricsText()), `oncegate_budget_used_ratio{id="spender",period="day"`) {
		t.Fatal("a gauge for a budget that is not set")
	}
	for range 2 {
		if _, err := cl.Chat.Completions.New(context.Background(), oaParams("chat", "refused again")); err == nil {
			t.Fatal("served past the month")
		}
	}
	e.restart()
	cl = e.openai(nil, oopt2.WithAPIKey(keySpender))
	if _, err := cl.Chat.Completions.New(context.Background(), oaParams("chat", "refused after a restart")); err == nil {
		t.Fatal("served past the month after a restart")
	}
	// Another budget's crossing is the next event: none of the above sent
	// the tenant's again (events leave in the order they are found).
	// A key whose lifetime cannot hold one attempt: refused at once.
	v := e.issue(`{"tenant":"acme","budget":{"cost_usd_total":0.0001}}`)
	kc := e.openai(nil, oopt2.WithAPIKey(v.Key))
	if _, err := kc.Chat.Completions.New(context.Background(), oaParams("chat", "marker")); err == nil {
		t.Fatal("the key's request was served")
	}
	if ev := sink.next(); ev.Scope != "key" || ev.Subject != v.ID || ev.Period != "total" || ev.Threshold != 1 {
		t.Fatalf("the next event %+v, want the key's lifetime at 100 %%", ev)
	}
	e.waitMetric(`oncegate_budget_alerts_total{result="sent"}`, 1) // since the restart: the key's alone
}

// A webhook that fails is tried again with a growing backoff, while the
// gateway keeps answering: the second try is held until requests were
// served, the third is taken; each event arrives once taken, after
// three tries, signed each time.
func TestBudgetWebhookRetriedWhileRequestsAreServed(t *testing.T) {
	held, proceed := make(chan struct{}, 4), make(chan struct{})
	sink, url := newWebhookSink(t, webhookSecret, func(_ string, try int) int {
		switch try {
		case 1:
			return 500
		case 2:
			held <- struct{}{}
			<-proceed
			return 503
		}
		return 200
	})
	e := newEnvOpts(t, envOptions{mock: mock.Config{Tokens: 90}, yaml: webhookYAML(url),
		config: withSpender(t, `{cost_usd_per_month: 0.001}`), webhook: alerts.WebhookConfig{Backoff: time.Millisecond}})
	cl := e.openai(nil, oopt2.WithAPIKey(keySpender))
	if _, err := spendUntilRefused(t, cl, "retried"); err == nil {
		t.Fatal("no refusal")
	}
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the webhook was not tried a second time")
	}
	for i := range 3 { // the webhook's sender is stuck; requests are not
		acme := e.openai(nil)
		if _, err := acme.Chat.Completions.New(context.Background(), oaParams("chat", "served "+strconv.Itoa(i))); err != nil {
			t.Fatalf("a request while the webhook hangs: %v", err)
		}
	}
	close(proceed)
	for _, want := range []float64{0.8, 1} {
		ev := sink.next()
		sink.mu.Lock()
		tries := sink.tries[ev.ID]
		sink.mu.Unlock()
		if ev.Threshold != want || tries != 3 {
			t.Fatalf("event %+v after %d tries, want %g after 3", ev, tries, want)
		}
	}
	e.waitMetric(`oncegate_budget_alerts_total{result="sent"}`, 2)
}

// waitMetric waits until /metrics has sample at want: a value the
// gateway sets in the background once an event was seen elsewhere.
func (e *env) waitMetric(sample string, want float64) {
	e.t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := re.FindSubmatch(e.metricsText())
		if m != nil {
			if v, _ := strconv.ParseFloat(string(m[1]), 64); v == want {
				return
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s never reached %g (last: %q)", sample, want, m)
		}
		runtime.Gosched()
	}
}
