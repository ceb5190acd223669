package ledger

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
)

// Spend facts (docs/spend.md, "How the report reads"): every store keeps,
// beside each receipt and in the same commit, the few numbers and names
// the spend report sums, in narrow columns indexed by tenant and creation
// time, so a month's report reads those columns rather than decoding
// every receipt. They are derived from the receipt's JSON by
// ReceiptFacts alone, so they agree with it to the nano-dollar on every
// backend; a receipt re-stored replaces its facts, and the sweep deletes
// them with it.

// SpendFacts are what the spend report reads of one receipt.
type SpendFacts struct {
	RequestID string
	// Tenant is the tenant the receipt is stored under.
	Tenant string
	// Created is the receipt's created_at, in Unix nanoseconds.
	Created int64
	KeyID   string
	KeyName string
	User    string
	Model   string
	// Tags are the receipt's tags as TagSet writes them ("" for none).
	Tags string
	// Attempts is the receipt's totals.attempts.
	Attempts int64
	// InputTokens and OutputTokens are summed over its attempts.
	InputTokens, OutputTokens int64
	// Cost is totals.cost_usd in nano-USD; Orphans the sum of its
	// attempts' orphans_cost_usd, each in nano-USD.
	Cost, Orphans int64
}

// factsJSON is the members of a receipt ReceiptFacts decodes: decoding
// only these is several times faster than the whole receipt.
type factsJSON struct {
	Model     string    `json:"model"`
	KeyID     string    `json:"key_id"`
	KeyName   string    `json:"key_name"`
	User      string    `json:"user"`
	Tags      []string  `json:"tags"`
	CreatedAt time.Time `json:"created_at"`
	Attempts  []struct {
		Usage struct {
			InputTokens  int64 `json:"input_tokens"`
			OutputTokens int64 `json:"output_tokens"`
		} `json:"usage"`
		OrphansCostUSD float64 `json:"orphans_cost_usd"`
	} `json:"attempts"`
	Totals struct {
		Attempts int64   `json:"attempts"`
		CostUSD  float64 `json:"cost_usd"`
	} `json:"totals"`
}

// ReceiptFacts derives the spend facts of a receipt stored under tenant
// with id requestID. ok is false for a body that is not a receipt (it
// does not decode, or has no created_at): such a body has no facts and
// no report counts it. It is the one place the facts come from: every
// backend calls it, and so does each migration that adds them to
// receipts stored before.
func ReceiptFacts(tenant, requestID string, body []byte) (f *SpendFacts, ok bool) {
	var rc factsJSON
	if json.Unmarshal(body, &rc) != nil || rc.CreatedAt.IsZero() {
		return nil, false
	}
	f = &SpendFacts{RequestID: requestID, Tenant: tenant, Created: UnixNano(rc.CreatedAt), KeyID: rc.KeyID, KeyName: rc.KeyName,
		User: rc.User, Model: rc.Model, Tags: TagSet(rc.Tags), Attempts: rc.Totals.Attempts, Cost: int64(gw.NanoFromUSD(rc.Totals.CostUSD))}
	for _, a := range rc.Attempts {
		f.InputTokens += a.Usage.InputTokens
		f.OutputTokens += a.Usage.OutputTokens
		f.Orphans += int64(gw.NanoFromUSD(a.OrphansCostUSD))
	}
	return f, true
}

// SpendFacts are the spend facts of f's receipt: those its writer gave
// (f.Facts), else derived from it (ReceiptFacts); ok is false when it has
// no receipt, or its receipt has none.
func (f *Finish) SpendFacts() (*SpendFacts, bool) {
	if f.Receipt == nil {
		return nil, false
	}
	if f.Facts != nil {
		c := *f.Facts
		c.RequestID, c.Tenant = f.RequestID, f.Tenant
		return &c, true
	}
	return ReceiptFacts(f.Tenant, f.RequestID, f.Receipt)
}

// Args are f's values in SpendFactCols order.
func (f *SpendFacts) Args() []any {
	return []any{f.RequestID, f.Tenant, f.Created, f.KeyID, f.KeyName, f.User, f.Model, f.Tags, f.Attempts,
		f.InputTokens, f.OutputTokens, f.Cost, f.Orphans}
}

// SpendFactCols are the spend facts' columns, in Args order (end_user is
// the receipt's user: "user" is a reserved word in SQL).
const SpendFactCols = `request_id, tenant, created_at, key_id, key_name, end_user, model, tags, attempts, input_tokens, output_tokens, cost, orphans`

// tagSep surrounds each tag in a TagSet: a control character, which no
// tag holds (tags are printable UTF-8, docs/spend.md).
const tagSep = "\x1f"

// TagSet writes tags as one column: "" for none, else each tag between
// separators ("\x1fa\x1fb\x1f"), in the receipt's order, so "a request
// tagged t" is a substring test for TagNeedle(t), and the report groups
// by the whole set and then counts each set in the row of each of its
// tags (SplitTags).
func TagSet(tags []string) string {
	if len(tags) == 0 {
		return ""
	}
	return tagSep + strings.Join(tags, tagSep) + tagSep
}

// SplitTags reads what TagSet wrote.
func SplitTags(set string) []string {
	if set == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(strings.TrimPrefix(set, tagSep), tagSep), tagSep)
}

// TagNeedle is what a TagSet holding tag contains.
func TagNeedle(tag string) string { return tagSep + tag + tagSep }

// The spend facts' groupings a store sums by (SpendQuery.By).
const (
	ByTenant  = "tenant"
	ByKey     = "key" // by key id, then the key's name as the receipts had it
	ByKeyName = "key_name"
	ByUser    = "user"
	ByModel   = "model"
	ByDay     = "day"  // by UTC day (SpendSum.Day)
	ByTags    = "tags" // by the whole TagSet
)

// SpendQuery asks for the spend facts of receipts created in [From, To),
// of Tenants (nil: every tenant), that match every filter set, summed by
// one grouping.
type SpendQuery struct {
	Tenants  []string
	From, To time.Time
	By       string
	// Filters: "" keeps all. Tag keeps receipts with that tag among theirs.
	Key, KeyName, User, Model, Tag string
}

// SpendSum is one group of a SpendQuery: the sums of its receipts' facts.
type SpendSum struct {
	// Group is the grouping's value (the TagSet by tags; "" by day).
	Group string
	// Day is the UTC day (days since the epoch) by day.
	Day int64
	// Name is the key name by key, and First the least request id of
	// the group: a key's receipts may carry more than one name.
	Name, First               string
	Requests, Attempts        int64
	InputTokens, OutputTokens int64
	Cost, Orphans             int64
}

// SpendStore sums spend facts.
type SpendStore interface {
	// SpendSums sums the spend facts of the receipts q asks for, one
	// SpendSum a group, in no particular order. It reads the facts'
	// index by tenant and creation time, never the receipts.
	SpendSums(ctx context.Context, q SpendQuery) ([]SpendSum, error)
}

// Keeps reports whether q asks for f (tenant, time and filters).
func (q *SpendQuery) Keeps(f *SpendFacts) bool {
	return (q.Tenants == nil || slices.Contains(q.Tenants, f.Tenant)) && f.Created >= UnixNano(q.From) && f.Created < UnixNano(q.To) &&
		(q.Key == "" || f.KeyID == q.Key) && (q.KeyName == "" || f.KeyName == q.KeyName) && (q.User == "" || f.User == q.User) &&
		(q.Model == "" || f.Model == q.Model) && (q.Tag == "" || strings.Contains(f.Tags, TagNeedle(q.Tag)))
}

// SumFacts sums facts as a store's SpendSums does: the memory store's,
// and what the conformance suite holds the others to.
func SumFacts(q SpendQuery, facts func(yield func(*SpendFacts) bool)) []SpendSum {
	type gk struct {
		group, name string
		day         int64
	}
	groups := map[gk]*SpendSum{}
	for f := range facts {
		if !q.Keeps(f) {
			continue
		}
		var k gk
		switch q.By {
		case ByTenant:
			k.group = f.Tenant
		case ByKey:
			k.group, k.name = f.KeyID, f.KeyName
		case ByKeyName:
			k.group = f.KeyName
		case ByUser:
			k.group = f.User
		case ByModel:
			k.group = f.Model
		case ByDay:
			k.day = SpendDayOf(f.Created)
		case ByTags:
			k.group = f.Tags
		}
		s := groups[k]
		if s == nil {
			s = &SpendSum{Group: k.group, Name: k.name, Day: k.day, First: f.RequestID}
			groups[k] = s
		}
		s.First = min(s.First, f.RequestID)
		s.Requests++
		s.Attempts += f.Attempts
		s.InputTokens += f.InputTokens
		s.OutputTokens += f.OutputTokens
		s.Cost += f.Cost
		s.Orphans += f.Orphans
	}
	out := make([]SpendSum, 0, len(groups))
	for _, s := range groups {
		if q.By != ByKey {
			s.First = ""
		}
		out = append(out, *s)
	}
	SortSums(out)
	return out
}

// SortSums orders sums by group, day, name: how tests compare them.
func SortSums(s []SpendSum) {
	slices.SortFunc(s, func(a, b SpendSum) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Day, b.Day), cmp.Compare(a.Name, b.Name))
	})
}

// SpendDayOf is the UTC day Unix nanoseconds fall on, as SQL's integer
// division finds it (creation times are after the epoch).
func SpendDayOf(ns int64) int64 { return ns / int64(24*time.Hour) }

// String shows a sum in test failures.
func (s SpendSum) String() string {
	return s.Group + "/" + strconv.FormatInt(s.Day, 10) + "/" + s.Name + ": " + strconv.FormatInt(s.Requests, 10) + " requests, " +
		strconv.FormatInt(s.Cost, 10) + " nano-USD"
}
