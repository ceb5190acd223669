package admin

import (
	"cmp"
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/receipt"
)

// The spend report (docs/keys-and-teams.md): GET /admin/spend sums the receipts
// created in [from, to) per tenant, key, model, route or UTC day, so it
// agrees with them to the micro-dollar — each receipt's cost is added in
// nano-USD. Grouped by route, a receipt counts for each route it had an
// attempt on, with those attempts' tokens and cost. Orphans (copies of
// a conversation's turn the provider kept, docs/conversations.md) are
// charged to the tenant apart from receipts' totals: orphans_cost_usd
// shows what the receipts' attempts recorded of them, never in cost_usd.

// SpendRow is one group of the spend report.
type SpendRow struct {
	Group          string  `json:"group"`
	Requests       int     `json:"requests"`
	Attempts       int     `json:"attempts"`
	InputTokens    int64   `json:"input_tokens"`
	OutputTokens   int64   `json:"output_tokens"`
	CostUSD        float64 `json:"cost_usd"`
	OrphansCostUSD float64 `json:"orphans_cost_usd"`

	cost, orphans gw.NanoUSD
}

// spendGroups are the report's groupings.
var spendGroups = []string{"tenant", "key", "model", "route", "day"}

// spendSlack is how far before `from` the scan of a tenant's receipts
// (newest first, by request id) goes on, for ids and creation times
// taken from clocks a little apart.
const spendSlack = 10 * time.Minute

// SpendFilter keeps the receipts of one tenant, key or model; "" keeps all.
type SpendFilter struct{ Tenant, Key, Model string }

func (f SpendFilter) keep(rc *receipt.Receipt) bool {
	return (f.Tenant == "" || rc.Tenant == f.Tenant) && (f.Key == "" || rc.KeyID == f.Key) && (f.Model == "" || rc.Model == f.Model)
}

// serveSpend answers GET /admin/spend?group_by=&from=&to=&format=, and
// the filters tenant=, key=, model=.
func (a *API) serveSpend(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	bad := func(param, format string, args ...any) {
		(&api.Error{Code: api.CodeInvalidRequest, Param: param, Message: fmt.Sprintf(format, args...)}).Write(w, provider.OpenAI, api.Meta{})
	}
	by := cmp.Or(q.Get("group_by"), "tenant")
	if !slices.Contains(spendGroups, by) {
		bad("group_by", "group_by must be one of %v", spendGroups)
		return
	}
	format := cmp.Or(q.Get("format"), "json")
	if format != "json" && format != "csv" {
		bad("format", "format must be json or csv")
		return
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
	rows, err := a.Spend(r.Context(), by, from, to, SpendFilter{Tenant: q.Get("tenant"), Key: q.Get("key"), Model: q.Get("model")})
	if err != nil {
		api.StoreUnavailable(err).Write(w, provider.OpenAI, api.Meta{})
		return
	}
	if format == "csv" {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		_ = WriteSpendCSV(w, rows)
		return
	}
	api.WriteJSON(w, http.StatusOK, map[string]any{"object": "spend", "group_by": by, "from": from, "to": to, "data": rows})
}

// parseWhen reads an RFC 3339 time or a UTC date.
func parseWhen(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	return time.Parse(time.DateOnly, s)
}

// WriteSpendCSV writes the report as CSV with a header row.
func WriteSpendCSV(w interface{ Write([]byte) (int, error) }, rows []SpendRow) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"group", "requests", "attempts", "input_tokens", "output_tokens", "cost_usd", "orphans_cost_usd"})
	for _, r := range rows {
		_ = cw.Write([]string{r.Group, strconv.Itoa(r.Requests), strconv.Itoa(r.Attempts), strconv.FormatInt(r.InputTokens, 10),
			strconv.FormatInt(r.OutputTokens, 10), strconv.FormatFloat(r.CostUSD, 'f', -1, 64), strconv.FormatFloat(r.OrphansCostUSD, 'f', -1, 64)})
	}
	cw.Flush()
	return cw.Error()
}

// Spend sums the receipts created in [from, to) that f keeps by group
// (tenant, key, model, route or day), of every tenant configured or
// owning a key. Rows come sorted by group.
func (a *API) Spend(ctx context.Context, by string, from, to time.Time, f SpendFilter) ([]SpendRow, error) {
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
	for _, t := range tenants {
		err := a.eachReceipt(ctx, t, from, func(rc *receipt.Receipt) {
			if rc.CreatedAt.Before(from) || !rc.CreatedAt.Before(to) || !f.keep(rc) {
				return
			}
			addReceipt(by, rc, row)
		})
		if err != nil {
			return nil, err
		}
	}
	out := make([]SpendRow, 0, len(groups))
	for _, r := range groups {
		r.CostUSD, r.OrphansCostUSD = r.cost.USD(), r.orphans.USD()
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b SpendRow) int { return cmp.Compare(a.Group, b.Group) })
	return out, nil
}

// addReceipt adds a receipt to its group (to each of its routes' groups).
func addReceipt(by string, rc *receipt.Receipt, row func(string) *SpendRow) {
	if by == "route" {
		seen := map[string]bool{}
		for _, a := range rc.Attempts {
			r := row(a.Route)
			if !seen[a.Route] {
				seen[a.Route] = true
				r.Requests++
			}
			r.Attempts++
			r.InputTokens += a.Usage.InputTokens
			r.OutputTokens += a.Usage.OutputTokens
			r.cost += gw.NanoFromUSD(a.CostUSD)
			r.orphans += gw.NanoFromUSD(a.OrphansCostUSD)
		}
		return
	}
	var key string
	switch by {
	case "tenant":
		key = rc.Tenant
	case "key":
		key = rc.KeyID
	case "model":
		key = rc.Model
	case "day":
		key = rc.CreatedAt.UTC().Format(time.DateOnly)
	}
	r := row(key)
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
func (a *API) eachReceipt(ctx context.Context, tenant string, from time.Time, f func(*receipt.Receipt)) error {
	after := ""
	for {
		page, err := a.store.Receipts(ctx, tenant, 500, after)
		if err != nil {
			return err
		}
		for _, b := range page {
			rc, err := receipt.Parse(b)
			if err != nil {
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
