package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	oopt2 "github.com/openai/openai-go/v3/option"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/mock"
)

// adminDo sends an admin API request with key (the admin key unless
// told) and decodes a JSON answer into out (when not nil).
func (e *env) adminDo(key, method, path, body string, out any) (int, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if out != nil && res.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
	return res.StatusCode, b
}

// issue issues a virtual key through the admin API.
func (e *env) issue(body string) admin.KeyView {
	e.t.Helper()
	var v admin.KeyView
	if st, b := e.adminDo(keyAdmin, "POST", "/admin/keys", body, &v); st != 201 || !strings.HasPrefix(v.Key, "og-") {
		e.t.Fatalf("issue %s: %d %s", body, st, b)
	}
	return v
}

// apiErrorOf returns the status and code of an SDK error.
func apiErrorOf(t *testing.T, err error) (int, string, http.Header) {
	t.Helper()
	var ae *openai.Error
	if !errors.As(err, &ae) {
		t.Fatalf("want an API error, got %v", err)
	}
	return ae.StatusCode, ae.Code, ae.Response.Header
}

func TestVirtualKeyIssueUseRevoke(t *testing.T) {
	e := newEnv(t, mock.Config{})
	v := e.issue(`{"tenant":"acme","name":"search-app","models":["chat"],"metadata":{"team":"search"}}`)
	var hdr http.Header
	cl := e.openai(&hdr, oopt2.WithAPIKey(v.Key))
	res, err := cl.Chat.Completions.New(context.Background(), oaParams("chat", "hello"))
	if err != nil || len(res.Choices) != 1 {
		t.Fatalf("a request with the issued key: %v", err)
	}
	rc := e.receiptAs(v.Key, hdr.Get("X-Oncegate-Request-Id"))
	if rc.KeyID != v.ID || rc.Tenant != "acme" {
		t.Fatalf("receipt key_id %q tenant %q, want %q acme", rc.KeyID, rc.Tenant, v.ID)
	}
	// The tenant's file key still works beside it, and its receipts carry no key.
	if _, err := clientNew(e.openai(&hdr), context.Background(), oaParams("chat", "file key")); err != nil {
		t.Fatal(err)
	}
	if rc := e.receipt(hdr.Get("X-Oncegate-Request-Id")); rc.KeyID != "" {
		t.Fatalf("a file key's receipt names key %q", rc.KeyID)
	}
	st, body := e.adminDo(keyAdmin, "GET", "/admin/keys?tenant=acme", "", nil)
	if st != 200 || bytes.Contains(body, []byte(v.Key)) || !bytes.Contains(body, []byte(v.Prefix)) || !bytes.Contains(body, []byte(`"search-app"`)) {
		t.Fatalf("list: %d %s", st, body)
	}
	if st, body := e.adminDo(keyAdmin, "GET", "/admin/keys/"+v.ID, "", nil); st != 200 || bytes.Contains(body, []byte(v.Key)) {
		t.Fatalf("read: %d %s", st, body)
	}
	if st, _ := e.adminDo(keyAdmin, "DELETE", "/admin/keys/"+v.ID, "", nil); st != 204 {
		t.Fatalf("revoke: %d", st)
	}
	_, err = cl.Chat.Completions.New(context.Background(), oaParams("chat", "after revoke"))
	if st, code, _ := apiErrorOf(t, err); st != 401 || code != api.CodeUnauthorized {
		t.Fatalf("after revoke: %d %s", st, code)
	}
	if n := e.primary.Stats().Requests; n != 2 {
		t.Fatalf("primary saw %d requests, want 2 (nothing after the revocation)", n)
	}
}

func TestAdminAPIAuthAndStrictJSON(t *testing.T) {
	e := newEnv(t, mock.Config{})
	v := e.issue(`{"tenant":"acme"}`)
	for _, c := range []struct {
		key  string
		want int
	}{{"", 401}, {"sk-nope", 401}, {keyAcme, 403}, {v.Key, 403}, {keyAdmin, 200}} {
		if st, b := e.adminDo(c.key, "GET", "/admin/keys", "", nil); st != c.want {
			t.Errorf("key %q on /admin/keys: %d %s, want %d", c.key, st, b, c.want)
		}
	}
	for _, c := range []struct{ body, param string }{
		{`{"tenant":"acme","colour":"red"}`, "colour"},
		{`{"tenant":"acme","budget":{"requests_per_minute":"ten"}}`, "budget.requests_per_minute"},
		{`{"tenant":"acme","budget":{"cost_per_day":1}}`, "cost_per_day"},
		{`{"tenant":"nobody"}`, "tenant"},
		{`{"name":"x"}`, "tenant"},
		{`{"tenant":"acme","models":["gpt-9"]}`, "models"},
		{`{"tenant":"globex","max_data_boundary":"external"}`, "max_data_boundary"},
		{`{"tenant":"acme","expires_at":"tomorrow"}`, "expires_at"},
		{`{"tenant":"acme","expires_at":"2001-01-01T00:00:00Z"}`, "expires_at"},
	} {
		st, b := e.adminDo(keyAdmin, "POST", "/admin/keys", c.body, nil)
		var er struct {
			Error struct{ Param, Code string }
		}
		_ = json.Unmarshal(b, &er)
		if st != 400 || er.Error.Param != c.param || er.Error.Code != api.CodeInvalidRequest {
			t.Errorf("%s: %d %s, want 400 naming %s", c.body, st, b, c.param)
		}
	}
	if st, _ := e.adminDo(keyAdmin, "GET", "/admin/keys/key_nope", "", nil); st != 404 {
		t.Errorf("an unknown key: %d", st)
	}
}

func TestVirtualKeyRotateWithGraceAndUpdate(t *testing.T) {
	e := newEnv(t, mock.Config{})
	v := e.issue(`{"tenant":"acme"}`)
	var rot admin.KeyView
	if st, b := e.adminDo(keyAdmin, "POST", "/admin/keys/"+v.ID+"/rotate", `{"grace":"1h"}`, &rot); st != 200 || rot.Key == "" || rot.Key == v.Key {
		t.Fatalf("rotate: %d %s", st, b)
	}
	for _, k := range []string{v.Key, rot.Key} {
		if _, err := clientNew(e.openai(nil, oopt2.WithAPIKey(k)), context.Background(), oaParams("chat", "hi")); err != nil {
			t.Fatalf("within the grace, %s…: %v", k[:8], err)
		}
	}
	// A second rotation, without grace: the secret it replaces stops at
	// once, the first keeps its own grace.
	first := rot
	if st, b := e.adminDo(keyAdmin, "POST", "/admin/keys/"+v.ID+"/rotate", `{}`, &rot); st != 200 {
		t.Fatalf("rotate without grace: %d %s", st, b)
	}
	_, err := clientNew(e.openai(nil, oopt2.WithAPIKey(first.Key)), context.Background(), oaParams("chat", "hi"))
	if st, _, _ := apiErrorOf(t, err); st != 401 {
		t.Fatalf("the second secret after a rotation without grace: %d", st)
	}
	if _, err := clientNew(e.openai(nil, oopt2.WithAPIKey(v.Key)), context.Background(), oaParams("chat", "hi")); err != nil {
		t.Fatalf("the first secret within its own grace: %v", err)
	}
	// PATCH narrows the models: the next request is refused by name.
	if st, b := e.adminDo(keyAdmin, "PATCH", "/admin/keys/"+v.ID, `{"models":["chat-stop"],"name":"renamed"}`, nil); st != 200 {
		t.Fatalf("patch: %d %s", st, b)
	}
	before := e.primary.Stats().Requests
	_, err = clientNew(e.openai(nil, oopt2.WithAPIKey(rot.Key)), context.Background(), oaParams("chat", "hi"))
	if st, code, _ := apiErrorOf(t, err); st != 403 || code != api.CodeModelNotAllowed {
		t.Fatalf("a model outside the list: %d %s", st, code)
	}
	if n := e.primary.Stats().Requests; n != before {
		t.Fatalf("a refused model reached the provider (%d → %d)", before, n)
	}
}

func TestVirtualKeyLimits(t *testing.T) {
	e := newEnv(t, mock.Config{})
	ctx := context.Background()
	t.Run("requests per minute", func(t *testing.T) {
		v := e.issue(`{"tenant":"acme","budget":{"requests_per_minute":2}}`)
		cl := e.openai(nil, oopt2.WithAPIKey(v.Key))
		before := e.primary.Stats().Requests
		for range 2 {
			if _, err := cl.Chat.Completions.New(ctx, oaParams("chat", "rate")); err != nil {
				t.Fatal(err)
			}
		}
		_, err := cl.Chat.Completions.New(ctx, oaParams("chat", "rate"), oopt2.WithMaxRetries(0))
		st, code, h := apiErrorOf(t, err)
		if st != 429 || code != api.CodeKeyRateLimited || h.Get("Retry-After") == "" || h.Get("x-should-retry") != "true" {
			t.Fatalf("third request: %d %s %v", st, code, h)
		}
		if n := e.primary.Stats().Requests - before; n != 2 {
			t.Fatalf("primary saw %d, want 2", n)
		}
	})
	t.Run("tokens per minute", func(t *testing.T) {
		// max_tokens 50 and a short prompt: each request may use ~60.
		v := e.issue(`{"tenant":"acme","budget":{"tokens_per_minute":100}}`)
		cl := e.openai(nil, oopt2.WithAPIKey(v.Key))
		p := oaParams("chat", "tokens")
		p.MaxTokens = openai.Int(50)
		before := e.primary.Stats().Requests
		if _, err := cl.Chat.Completions.New(ctx, p); err != nil {
			t.Fatal(err)
		}
		var err error
		for range 3 {
			if _, err = cl.Chat.Completions.New(ctx, p, oopt2.WithMaxRetries(0)); err != nil {
				break
			}
		}
		st, code, h := apiErrorOf(t, err)
		if st != 429 || code != api.CodeKeyRateLimited || h.Get("Retry-After") == "" {
			t.Fatalf("over the tokens: %d %s", st, code)
		}
		if n := e.primary.Stats().Requests - before; n > 2 {
			t.Fatalf("primary saw %d requests of a 100-token minute at ~60 tokens each", n)
		}
	})
	t.Run("cost per day, kept across a restart", func(t *testing.T) {
		// Each request's worst case: ~10 prompt + 100 output tokens at
		// $2/Mtok ≈ $0.00022; the day allows a few.
		v := e.issue(`{"tenant":"acme","budget":{"cost_usd_per_day":0.0005}}`)
		cl := e.openai(nil, oopt2.WithAPIKey(v.Key))
		p := oaParams("chat", "cost")
		p.MaxTokens = openai.Int(100)
		before := e.primary.Stats().Requests
		var err error
		for range 50 {
			if _, err = cl.Chat.Completions.New(ctx, p); err != nil {
				break
			}
		}
		st, code, h := apiErrorOf(t, err)
		if st != 429 || code != api.CodeKeyBudget || h.Get("Retry-After") == "" || h.Get("x-should-retry") != "false" {
			t.Fatalf("over the day: %d %s %v", st, code, h)
		}
		sent := e.primary.Stats().Requests - before
		e.restart()
		cl = e.openai(nil, oopt2.WithAPIKey(v.Key))
		_, err = cl.Chat.Completions.New(ctx, p)
		if st, code, _ := apiErrorOf(t, err); st != 429 || code != api.CodeKeyBudget {
			t.Fatalf("after a restart: %d %s (the day's spend was forgotten)", st, code)
		}
		if n := e.primary.Stats().Requests - before; n != sent {
			t.Fatalf("after the limit the primary saw %d more", n-sent)
		}
		var got admin.KeyView
		e.adminDo(keyAdmin, "GET", "/admin/keys/"+v.ID, "", &got)
		if got.Spend == nil || got.Spend.TodayUSD <= 0 || got.Spend.TodayUSD > 0.0005 {
			t.Fatalf("the key's spend today: %+v", got.Spend)
		}
	})
	t.Run("concurrency", func(t *testing.T) {
		v := e.issue(`{"tenant":"acme","budget":{"max_concurrent":1}}`)
		lk, _ := e.gw.keys.Lookup(ctx, v.Key)
		release, apiErr := e.gw.keys.Enter(lk) // one request in progress
		if apiErr != nil {
			t.Fatal(apiErr.Message)
		}
		defer release()
		_, err := clientNew(e.openai(nil, oopt2.WithAPIKey(v.Key)), ctx, oaParams("chat", "busy"), oopt2.WithMaxRetries(0))
		if st, code, h := apiErrorOf(t, err); st != 429 || code != api.CodeKeyConcurrency || h.Get("Retry-After") == "" {
			t.Fatalf("a second request in progress: %d %s", st, code)
		}
	})
	t.Run("expiry", func(t *testing.T) {
		v := e.issue(`{"tenant":"acme","expires_at":"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `"}`)
		lk, _ := e.gw.keys.Lookup(ctx, v.Key)
		k := *lk.Stored
		k.ExpiresAt = time.Now().Add(-time.Second)
		if err := e.store.UpdateKey(ctx, &k); err != nil {
			t.Fatal(err)
		}
		e.gw.keys.Forget([]string{k.ID}, false)
		_, err := clientNew(e.openai(nil, oopt2.WithAPIKey(v.Key)), ctx, oaParams("chat", "late"))
		if st, _, _ := apiErrorOf(t, err); st != 401 {
			t.Fatalf("an expired key: %d", st)
		}
	})
}

// Many concurrent requests on a nearly spent key never take it past its
// day by more than one attempt's reservation.
func TestVirtualKeyConcurrentNeverOvershoots(t *testing.T) {
	e := newEnv(t, mock.Config{})
	ctx := context.Background()
	const limit = 0.001
	v := e.issue(`{"tenant":"acme","budget":{"cost_usd_per_day":0.001}}`)
	cl := e.openai(nil, oopt2.WithAPIKey(v.Key))
	p := oaParams("chat", "spend")
	p.MaxTokens = openai.Int(100)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := p
			q.Messages = userMsg("spend " + string(rune('a'+i%26)) + string(rune('a'+i/26)))
			_, _ = cl.Chat.Completions.New(ctx, q, oopt2.WithMaxRetries(0))
		}()
	}
	wg.Wait()
	rows, err := e.gw.adminAPI().Spend(ctx, "key", time.Now().Add(-time.Hour), time.Now().Add(time.Hour), admin.SpendFilter{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	var spent float64
	for _, r := range rows {
		if r.Group == v.ID {
			spent = r.CostUSD
		}
	}
	const oneReservation = (20 + 100) * 2.0 / 1e6 // a generous worst case of one attempt
	if spent <= 0 || spent > limit+oneReservation {
		t.Fatalf("64 concurrent requests spent $%g of a $%g day", spent, limit)
	}
}

// The store never holds an issued secret, and a digest read from it does
// not authenticate.
func TestVirtualKeySecretNeverStored(t *testing.T) {
	e := newEnv(t, mock.Config{})
	v := e.issue(`{"tenant":"acme"}`)
	var rot admin.KeyView
	e.adminDo(keyAdmin, "POST", "/admin/keys/"+v.ID+"/rotate", `{"grace":"1h"}`, &rot)
	stored, err := e.store.Key(context.Background(), v.ID)
	if err != nil || len(stored.Previous) != 1 {
		t.Fatalf("%+v %v", stored, err)
	}
	for _, stolen := range []string{stored.Digest, stored.Previous[0].Digest, "og-" + stored.Digest[:43]} {
		_, err := clientNew(e.openai(nil, oopt2.WithAPIKey(stolen)), context.Background(), oaParams("chat", "stolen"))
		if st, _, _ := apiErrorOf(t, err); st != 401 {
			t.Fatalf("a digest from the store authenticated: %d", st)
		}
	}
	e.stop()
	defer e.start()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		b, err := os.ReadFile(e.dbPath + suffix)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{v.Key, rot.Key, v.Key[3:], rot.Key[3:]} {
			if bytes.Contains(b, []byte(s)) {
				t.Fatalf("%s holds an issued secret", e.dbPath+suffix)
			}
		}
	}
}

// clientNew sends a chat completion with an SDK client.
func clientNew(cl openai.Client, ctx context.Context, p openai.ChatCompletionNewParams, opts ...oopt2.RequestOption) (*openai.ChatCompletion, error) {
	return cl.Chat.Completions.New(ctx, p, opts...)
}

// The spend report sums the receipts per group, to the nano-dollar, in
// JSON and in CSV, for every grouping: a request with two tags counts in
// both tag rows (and the report says so), the total counts it once, and
// a page of rows continues where the last ended.
func TestSpendReportEqualsReceipts(t *testing.T) {
	e := newEnv(t, mock.Config{})
	ctx := context.Background()
	a, b := e.issue(`{"tenant":"acme","name":"a"}`), e.issue(`{"tenant":"spender","name":"b"}`)
	for i, c := range []struct{ key, model, user, tags string }{
		{a.Key, "chat", "u1", "x,y"}, {a.Key, "chat-stop", "u2", "x"}, {b.Key, "chat", "u1", ""}, {keyAcme, "chat", "", "y"}, {keySpender, "chat-stop", "u3", "z"},
	} {
		p := oaParams(c.model, "spend "+string(rune('a'+i)))
		if c.user != "" {
			p.User = openai.String(c.user)
		}
		if _, err := clientNew(e.openai(nil, oopt2.WithAPIKey(c.key), oopt2.WithHeader("X-Oncegate-Tags", c.tags)), ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	var list struct {
		Data []struct {
			RequestID string `json:"request_id"`
		}
	}
	if st, body := e.adminDo(keyAdmin, "GET", "/v1/receipts?limit=100", "", &list); st != 200 || len(list.Data) != 5 {
		t.Fatalf("receipts: %d %s", st, body)
	}
	want := map[string]map[string]int64{}
	add := func(by, g string, cost int64) {
		if want[by] == nil {
			want[by] = map[string]int64{}
		}
		want[by][g] += cost
	}
	var total int64
	for _, r := range list.Data {
		tenant := "acme"
		rc, err := e.gw.receipt(ctx, tenant, r.RequestID)
		if err != nil {
			tenant = "spender"
			if rc, err = e.gw.receipt(ctx, tenant, r.RequestID); err != nil {
				t.Fatal(err)
			}
		}
		cost := int64(gwNano(rc.Totals.CostUSD))
		total += cost
		for by, g := range map[string]string{"tenant": rc.Tenant, "key": rc.KeyID, "key_name": rc.KeyName, "user": rc.User, "model": rc.Model,
			"day": rc.CreatedAt.UTC().Format(time.DateOnly), "month": rc.CreatedAt.UTC().Format("2006-01")} {
			add(by, g, cost)
		}
		tags := rc.Tags
		if len(tags) == 0 {
			tags = []string{""} // the untagged row
		}
		for _, tag := range tags {
			add("tag", tag, cost)
		}
		for _, at := range rc.Attempts {
			add("route", at.Route, int64(gwNano(at.CostUSD)))
		}
	}
	if len(want["tag"]) != 4 || len(want["user"]) != 4 || len(want["key_name"]) != 3 {
		t.Fatalf("the receipts' groups: %v", want)
	}
	for by, groups := range want {
		var rep struct {
			Data  []admin.SpendRow
			Total admin.SpendRow
			Note  string
		}
		if st, body := e.adminDo(keyAdmin, "GET", "/admin/spend?group_by="+by, "", &rep); st != 200 {
			t.Fatalf("%s: %d %s", by, st, body)
		}
		got := map[string]int64{}
		var sum int64
		for _, r := range rep.Data {
			got[r.Group] = int64(gwNano(r.CostUSD))
			sum += got[r.Group]
			if by == "key" && r.Group == a.ID && r.Name != "a" {
				t.Errorf("the key row of %s is named %q", a.ID, r.Name)
			}
		}
		if len(got) != len(groups) {
			t.Fatalf("by %s: groups %v, want %v", by, got, groups)
		}
		for g, v := range groups {
			if got[g] != v || v <= 0 {
				t.Errorf("by %s, %q: report %d nano-USD, receipts %d", by, g, got[g], v)
			}
		}
		if int64(gwNano(rep.Total.CostUSD)) != total || rep.Total.Requests != 5 {
			t.Errorf("by %s: total %d requests %d nano-USD, receipts 5 and %d", by, rep.Total.Requests, gwNano(rep.Total.CostUSD), total)
		}
		if (by == "tag") != (sum != total) || (by == "tag") != strings.Contains(rep.Note, "several tags") {
			t.Errorf("by %s: rows sum to %d, total %d, note %q", by, sum, total, rep.Note)
		}
		_, csvBody := e.adminDo(keyAdmin, "GET", "/admin/spend?format=csv&group_by="+by, "", nil)
		var buf bytes.Buffer
		_ = admin.WriteSpendCSV(&buf, by, rep.Data)
		if !bytes.Equal(csvBody, buf.Bytes()) || !bytes.HasPrefix(csvBody, []byte("group,requests,attempts,input_tokens,output_tokens,cost_usd,orphans_cost_usd")) {
			t.Errorf("by %s: the CSV differs from the JSON:\n%s", by, csvBody)
		}
		// Two rows a page: the pages join to the whole report.
		var paged []admin.SpendRow
		for q := "/admin/spend?limit=2&group_by=" + by; ; {
			var page struct {
				Data      []admin.SpendRow
				HasMore   bool   `json:"has_more"`
				NextAfter string `json:"next_after"`
			}
			if st, body := e.adminDo(keyAdmin, "GET", q, "", &page); st != 200 || len(page.Data) > 2 {
				t.Fatalf("%s: %d %s", q, st, body)
			}
			paged = append(paged, page.Data...)
			if !page.HasMore {
				break
			}
			q = "/admin/spend?limit=2&group_by=" + by + "&after=" + url.QueryEscape(page.NextAfter)
		}
		if !reflect.DeepEqual(paged, rep.Data) {
			t.Errorf("by %s: the pages %v, the report %v", by, paged, rep.Data)
		}
	}
	// Filters narrow the receipts before grouping.
	var rep struct{ Data []admin.SpendRow }
	if st, body := e.adminDo(keyAdmin, "GET", "/admin/spend?group_by=user&tag=x", "", &rep); st != 200 || len(rep.Data) != 2 ||
		rep.Data[0].Group != "u1" || rep.Data[1].Group != "u2" {
		t.Errorf("users of tag x: %d %s", st, body)
	}
	for _, q := range []string{"group_by=colour", "from=yesterday", "limit=0", "limit=10001", "colour=red", "from=2026-02-01&to=2026-01-01"} {
		if st, _ := e.adminDo(keyAdmin, "GET", "/admin/spend?"+q, "", nil); st != 400 {
			t.Errorf("%s: %d, want 400", q, st)
		}
	}
}

func gwNano(usd float64) int64 { return int64(gw.NanoFromUSD(usd)) }
