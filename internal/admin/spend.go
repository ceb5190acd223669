package admin

import (
	"cmp"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/provider"
)

// The spend report (docs/spend.md): GET /admin/spend sums the receipts
// created in [from, to) per tenant, key, key name, user, tag, model,
// route, UTC day or UTC month, so it agrees with them to the
// micro-dollar — each receipt's cost is added in nano-USD. Grouped by
// route, a receipt counts for each route it had an attempt on, with
// those attempts' tokens and cost; grouped by tag, a receipt counts in
// the row of each of its tags, whole. Orphans (copies of a
// conversation's turn the provider kept, docs/conversations.md) are
// charged to the tenant apart from receipts' totals: orphans_cost_usd
// shows what the receipts' attempts recorded of them, never in cost_usd.
// It sums the spend facts each store keeps beside its receipts, derived
// from them (docs/spend.md, "How the report reads"); by route, the
// receipts themselves.

// SpendRow is one group of the spend report.
type SpendRow struct {
	Group string `json:"group"`
	// Name is a key's name as it is now, on rows grouped by key.
	Name           string  `json:"name,omitempty"`
	Requests       int     `json:"requests"`
	Attempts       int     `json:"attempts"`
	InputTokens    int64   `json:"input_tokens"`
	OutputTokens   int64   `json:"output_tokens"`
	CostUSD        float64 `json:"cost_usd"`
	OrphansCostUSD float64 `json:"orphans_cost_usd"`

	cost, orphans gw.NanoUSD
}

// spendGroups are the report's groupings.
var spendGroups = []string{"tenant", "key", "key_name", "user", "tag", "model", "route", "day", "month"}

// overlapNotes say, for the groupings whose rows may count a request in
// more than one row, how the rows relate to the total.
var overlapNotes = map[string]string{
	"tag":   "a request with several tags counts, whole, in the row of each: the rows add up to more than the total when requests have more than one tag; requests without tags are in the group \"\"",
	"route": "a request counts in the row of each route it had an attempt on, with those attempts' tokens and cost: the costs add up to the total, the requests may not",
}

// Report pages: at most maxSpendLimit rows a page, defaultSpendLimit
// when the caller does not say.
const (
	defaultSpendLimit = 1000
	maxSpendLimit     = 10000
)

// spendSlack is how far before `from` the scan of a tenant's receipts
// by route (newest first, by request id) goes on, for ids and creation
// times taken from clocks a little apart.
const spendSlack = 10 * time.Minute

// SpendFilter keeps the receipts that match every field set; "" keeps all.
type SpendFilter struct{ Tenant, Key, KeyName, User, Tag, Model string }

func (f SpendFilter) keep(rc *spendFacts) bool {
	return (f.Tenant == "" || rc.Tenant == f.Tenant) && (f.Key == "" || rc.KeyID == f.Key) && (f.Model == "" || rc.Model == f.Model) &&
		(f.KeyName == "" || rc.KeyName == f.KeyName) && (f.User == "" || rc.User == f.User) && (f.Tag == "" || slices.Contains(rc.Tags, f.Tag))
}

// SpendReport is the report over every group, before it is paged.
type SpendReport struct {
	Rows []SpendRow
	// Total counts each request once, whatever the grouping.
	Total SpendRow
}

// serveSpend answers GET /admin/spend?group_by=&from=&to=&format=, the
// filters tenant=, key=, key_name=, user=, tag=, model=, and the page:
// limit= rows after the group after=.
func (a *API) serveSpend(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	bad := func(param, format string, args ...any) {
		(&api.Error{Code: api.CodeInvalidRequest, Param: param, Message: fmt.Sprintf(format, args...)}).Write(w, provider.OpenAI, api.Meta{})
	}
	for k := range q {
		if !slices.Contains(spendParams, k) {
			bad(k, "unknown parameter %q: the spend report takes %s", k, strings.Join(spendParams, ", "))
			return
		}
	}
	by := cmp.Or(q.Get("group_by"), "tenant")
	if !slices.Contains(spendGroups, by) {
		bad("group_by", "group_by must be one of %s", strings.Join(spendGroups, ", "))
		return
	}
	format := cmp.Or(q.Get("format"), "json")
	if format != "json" && format != "csv" {
		bad("format", "format must be json or csv")
		return
	}
	limit := defaultSpendLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxSpendLimit {
			bad("limit", "limit must be a whole number from 1 to %d, found %q", maxSpendLimit, s)
			return
		}
		limit = n
	}
	now := a.clock.Now().UTC()
	from, to := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC), now.Add(time.Nanosecond)
	for _, p := range []struct {
		name string
		t    *time.Time
	}{{"from", &from}, {"to", &to}} {
		if s := q.Get(p.name); s != "" {
			t, err := parseWhen(s)
			if err != nil {
				bad(p.name, "%s must be an RFC 3339 time or a date (2026-01-31): %v", p.name, err)
				return
			}
			*p.t = t
		}
	}
	if !from.Before(to) {
		bad("to", "to (%s) must be after from (%s)", to.Format(time.RFC3339Nano), from.Format(time.RFC3339Nano))
		return
	}
	f := SpendFilter{Tenant: q.Get("tenant"), Key: q.Get("key"), KeyName: q.Get("key_name"), User: q.Get("user"), Tag: q.Get("tag"), Model: q.Get("model")}
	rep, err := a.SpendReport(r.Context(), by, from, to, f)
	if err != nil {
		api.StoreUnavailable(err).Write(w, provider.OpenAI, api.Meta{})
		return
	}
	rows := rep.Rows
	if q.Has("after") { // groups sort as strings: "" first
		after := q.Get("after")
		rows = rows[sort.Search(len(rows), func(i int) bool { return rows[i].Group > after }):]
	}
	more := len(rows) > limit
	if more {
		rows = rows[:limit]
		// The next page: the same query with after= this.
		w.Header().Set("X-Oncegate-Next-After", rows[len(rows)-1].Group)
	}
	if format == "csv" {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		_ = WriteSpendCSV(w, by, rows)
		return
	}
	out := map[string]any{"object": "spend", "group_by": by, "from": from, "to": to, "data": rows, "has_more": more, "total": rep.Total}
	if more {
		out["next_after"] = rows[len(rows)-1].Group
	}
	if note, ok := overlapNotes[by]; ok {
		out["note"] = note
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// spendParams are the query parameters the report takes.
var spendParams = []string{"group_by", "from", "to", "format", "tenant", "key", "key_name", "user", "tag", "model", "limit", "after"}

// parseWhen reads an RFC 3339 time or a UTC date.
func parseWhen(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	return time.Parse(time.DateOnly, s)
}

// WriteSpendCSV writes the report as CSV with a header row; grouped by
// key, each row names the key in a last column.
func WriteSpendCSV(w interface{ Write([]byte) (int, error) }, by string, rows []SpendRow) error {
	cw := csv.NewWriter(w)
	head := []string{"group", "requests", "attempts", "input_tokens", "output_tokens", "cost_usd", "orphans_cost_usd"}
	if by == "key" {
		head = append(head, "name")
	}
	_ = cw.Write(head)
	for _, r := range rows {
		rec := []string{r.Group, strconv.Itoa(r.Requests), strconv.Itoa(r.Attempts), strconv.FormatInt(r.InputTokens, 10),
			strconv.FormatInt(r.OutputTokens, 10), strconv.FormatFloat(r.CostUSD, 'f', -1, 64), strconv.FormatFloat(r.OrphansCostUSD, 'f', -1, 64)}
		if by == "key" {
			rec = append(rec, r.Name)
		}
		_ = cw.Write(rec)
	}
	cw.Flush()
	return cw.Error()
}

// Spend is SpendReport's rows.
func (a *API) Spend(ctx context.Context, by string, from, to time.Time, f SpendFilter) ([]SpendRow, error) {
	rep, err := a.SpendReport(ctx, by, from, to, f)
	if err != nil {
		return nil, err
	}
	return rep.Rows, nil
}

// SpendReport sums the receipts created in [from, to) that f keeps by
// group (one of spendGroups), of every tenant configured or owning a
// key. Rows come sorted by group. Every grouping but route sums the
// spend facts the store keeps beside each receipt (ledger.SpendStore),
// by tenant and creation time in its index; by route it reads the
// receipts themselves, whose attempts name the routes (docs/spend.md,
// "How the report reads").
func (a *API) SpendReport(ctx context.Context, by string, from, to time.Time, f SpendFilter) (*SpendReport, error) {
	tenants, err := a.spendTenants(ctx, f.Tenant)
	if err != nil {
		return nil, err
	}
	groups := map[string]*SpendRow{}
	row := func(k string) *SpendRow {
		if groups[k] == nil {
			groups[k] = &SpendRow{Group: k}
		}
		return groups[k]
	}
	var total SpendRow
	if by == "route" {
		err = a.routeSpend(ctx, tenants, from, to, f, row, &total)
	} else if len(tenants) > 0 {
		err = a.factSpend(ctx, by, tenants, from, to, f, row, &total)
	}
	if err != nil {
		return nil, err
	}
	names := map[string]string{}
	if by == "key" && len(groups) > 0 {
		keys, err := a.store.Keys(ctx, ledger.KeyFilter{})
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			names[k.ID] = k.Name
		}
	}
	rep := &SpendReport{Rows: make([]SpendRow, 0, len(groups))}
	for _, r := range groups {
		r.CostUSD, r.OrphansCostUSD = r.cost.USD(), r.orphans.USD()
		if by == "key" {
			r.Name = cmp.Or(names[r.Group], r.Name)
		}
		rep.Rows = append(rep.Rows, *r)
	}
	slices.SortFunc(rep.Rows, func(a, b SpendRow) int { return cmp.Compare(a.Group, b.Group) })
	total.CostUSD, total.OrphansCostUSD = total.cost.USD(), total.orphans.USD()
	rep.Total = total
	return rep, nil
}

// factGroupings are the store's groupings (ledger.SpendQuery.By) each of
// the report's but route sums: a month is its days', a tag's row each
// set of tags' that holds it.
var factGroupings = map[string]string{"tenant": ledger.ByTenant, "key": ledger.ByKey, "key_name": ledger.ByKeyName,
	"user": ledger.ByUser, "model": ledger.ByModel, "day": ledger.ByDay, "month": ledger.ByDay, "tag": ledger.ByTags}

// factSpend adds the store's sums of spend facts to the groups row
// returns and to total, which counts each request once.
func (a *API) factSpend(ctx context.Context, by string, tenants []string, from, to time.Time, f SpendFilter,
	row func(string) *SpendRow, total *SpendRow) error {
	sums, err := a.store.SpendSums(ctx, ledger.SpendQuery{Tenants: tenants, From: from, To: to, By: factGroupings[by],
		Key: f.Key, KeyName: f.KeyName, User: f.User, Model: f.Model, Tag: f.Tag})
	if err != nil {
		return err
	}
	// A key's receipts may carry more than one name: its row keeps the
	// one of its least request id, as the receipts read newest first left it.
	first := map[string]string{}
	for _, s := range sums {
		addSum(total, &s)
		switch by {
		case "tag":
			tags := ledger.SplitTags(s.Group)
			if len(tags) == 0 {
				tags = []string{""}
			}
			for _, t := range tags {
				addSum(row(t), &s)
			}
		case "day", "month":
			layout := time.DateOnly
			if by == "month" {
				layout = "2006-01"
			}
			addSum(row(time.Unix(0, s.Day*int64(24*time.Hour)).UTC().Format(layout)), &s)
		case "key":
			r := row(s.Group)
			if at, ok := first[s.Group]; !ok || s.First < at {
				first[s.Group], r.Name = s.First, s.Name
			}
			addSum(r, &s)
		default:
			addSum(row(s.Group), &s)
		}
	}
	return nil
}

// addSum adds a group of spend facts to r.
func addSum(r *SpendRow, s *ledger.SpendSum) {
	r.Requests += int(s.Requests)
	r.Attempts += int(s.Attempts)
	r.InputTokens += s.InputTokens
	r.OutputTokens += s.OutputTokens
	r.cost += gw.NanoUSD(s.Cost)
	r.orphans += gw.NanoUSD(s.Orphans)
}

// routeSpend adds the receipts' attempts to the group of each one's
// route, and each receipt once to total: the routes are in the
// receipts alone.
func (a *API) routeSpend(ctx context.Context, tenants []string, from, to time.Time, f SpendFilter, row func(string) *SpendRow, total *SpendRow) error {
	for _, t := range tenants {
		err := a.eachReceipt(ctx, t, from, func(rc *spendFacts) {
			if rc.CreatedAt.Before(from) || !rc.CreatedAt.Before(to) || !f.keep(rc) {
				return
			}
			seen := map[string]bool{}
			for _, at := range rc.Attempts {
				r := row(at.Route)
				if !seen[at.Route] {
					seen[at.Route] = true
					r.Requests++
				}
				r.Attempts++
				r.InputTokens += at.Usage.InputTokens
				r.OutputTokens += at.Usage.OutputTokens
				r.cost += gw.NanoFromUSD(at.CostUSD)
				r.orphans += gw.NanoFromUSD(at.OrphansCostUSD)
			}
			addWhole(total, rc)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// spendFacts is what the report grouped by route reads of a receipt:
// decoding only these members is several times faster than the whole
// receipt.
type spendFacts struct {
	RequestID string    `json:"request_id"`
	Tenant    string    `json:"tenant"`
	Model     string    `json:"model"`
	KeyID     string    `json:"key_id"`
	KeyName   string    `json:"key_name"`
	User      string    `json:"user"`
	Tags      []string  `json:"tags"`
	CreatedAt time.Time `json:"created_at"`
	Attempts  []struct {
		Route string `json:"route"`
		Usage struct {
			InputTokens  int64 `json:"input_tokens"`
			OutputTokens int64 `json:"output_tokens"`
		} `json:"usage"`
		CostUSD        float64 `json:"cost_usd"`
		OrphansCostUSD float64 `json:"orphans_cost_usd"`
	} `json:"attempts"`
	Totals struct {
		Attempts int     `json:"attempts"`
		CostUSD  float64 `json:"cost_usd"`
	} `json:"totals"`
}

// addWhole adds a whole receipt to r.
func addWhole(r *SpendRow, rc *spendFacts) {
	r.Requests++
	r.Attempts += rc.Totals.Attempts
	r.cost += gw.NanoFromUSD(rc.Totals.CostUSD)
	for _, a := range rc.Attempts {
		r.InputTokens += a.Usage.InputTokens
		r.OutputTokens += a.Usage.OutputTokens
		r.orphans += gw.NanoFromUSD(a.OrphansCostUSD)
	}
}

// spendTenants are the tenants whose receipts the report reads.
func (a *API) spendTenants(ctx context.Context, only string) ([]string, error) {
	if only != "" {
		return []string{only}, nil
	}
	var out []string
	for _, t := range a.gw.Policy().Tenants {
		out = append(out, t.ID)
	}
	keys, err := a.store.Keys(ctx, ledger.KeyFilter{})
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		if !slices.Contains(out, k.Tenant) {
			out = append(out, k.Tenant)
		}
	}
	return out, nil
}

// eachReceipt calls f with a tenant's receipts, newest first, until one
// created well before from.
func (a *API) eachReceipt(ctx context.Context, tenant string, from time.Time, f func(*spendFacts)) error {
	after := ""
	for {
		page, err := a.store.Receipts(ctx, tenant, 500, after)
		if err != nil {
			return err
		}
		for _, b := range page {
			rc := new(spendFacts)
			if err := json.Unmarshal(b, rc); err != nil {
				return fmt.Errorf("receipt of tenant %s: %w", tenant, err)
			}
			if rc.CreatedAt.Before(from.Add(-spendSlack)) {
				return nil
			}
			f(rc)
			after = rc.RequestID
		}
		if len(page) < 500 {
			return nil
		}
	}
}
