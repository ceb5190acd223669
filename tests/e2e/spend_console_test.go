package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	oaopt "github.com/openai/openai-go/v3/option"

	"github.com/oncegate/oncegate/internal/mock"
)

// spendShown is a row of the spend page's table as the page shows it.
type spendShown struct {
	Group    string `json:"group"`
	Name     string `json:"name"`
	Requests int    `json:"requests"`
	Attempts int    `json:"attempts"`
	Input    string `json:"input"`
	Output   string `json:"output"`
	Cost     string `json:"cost"`
	Orphans  string `json:"orphans"`
}

// spendAnswer is the part of GET /admin/spend's answer the page shows.
type spendAnswer struct {
	Data []struct {
		Group        string  `json:"group"`
		Name         string  `json:"name"`
		Requests     int     `json:"requests"`
		Attempts     int     `json:"attempts"`
		InputTokens  int64   `json:"input_tokens"`
		OutputTokens int64   `json:"output_tokens"`
		CostUSD      float64 `json:"cost_usd"`
		OrphansUSD   float64 `json:"orphans_cost_usd"`
	} `json:"data"`
	Total struct {
		Requests int     `json:"requests"`
		Attempts int     `json:"attempts"`
		CostUSD  float64 `json:"cost_usd"`
	} `json:"total"`
	Note    string `json:"note"`
	HasMore bool   `json:"has_more"`
}

// readSpendTable is a script that reads the spend page's table: its
// rows, its total row and the note under it.
const readSpendTable = `(() => {
	const row = (tr) => {
		const c = (cls) => (tr.querySelector("." + cls) || {}).textContent;
		return { group: tr.dataset.group, name: c("keyname") || "", requests: +c("requests"), attempts: +c("attempts"),
			input: c("input"), output: c("output"), cost: c("cost"), orphans: c("orphans") };
	};
	const note = document.querySelector("#note");
	return { rows: [...document.querySelectorAll("#report tbody tr")].map(row), total: row(document.querySelector("#report tfoot tr")),
		note: note.hidden ? "" : note.textContent, more: !document.querySelector("#more").hidden };
})()`

// The spend page in a real browser, against the report it shows: two
// named keys and the tenant's own make requests through the gateway with
// end users and tags (X-Oncegate-Tags, with an official SDK). Grouped by
// tag the page shows GET /admin/spend?group_by=tag's rows — requests,
// attempts, tokens and cost to the micro-dollar — its total, and the note
// that a request with two tags counts in both rows; the user filter
// narrows the rows and total as the API's user= does; two rows a page
// end in "more", which brings the third; grouped by key each row names
// its key.
func TestSpendPageInABrowser(t *testing.T) {
	browser := chromium(t)
	w := newWorld(t, mock.Config{Tokens: 7})
	if err := os.WriteFile(w.config, []byte(strings.ReplaceAll(consoleConfig, "MOCK", mockURL(t, w))), 0o644); err != nil {
		t.Fatal(err)
	}
	g := w.start("ONCEGATE_E2E_ADMIN="+adminKey, "ONCEGATE_E2E_OTHER=sk-other-tenant")
	_, search := issueOn(t, g, `{"tenant":"e2e","name":"search-web"}`)
	_, billing := issueOn(t, g, `{"tenant":"e2e","name":"invoice-bot"}`)
	for i, c := range []struct{ key, user, tags string }{
		{search, "ana", "ranking,eu"}, {search, "ben", "ranking"}, {billing, "ana", "dunning,eu"}, {billing, "", ""}, {apiKey, "cy", "dunning"}, {search, "ana", "eu"},
	} {
		if _, err := chatAs(g, c.key, "what does this cost? "+strconv.Itoa(i),
			oaopt.WithHeader("X-Oncegate-Tags", c.tags), oaopt.WithJSONSet("user", c.user)); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	report := func(query string) spendAnswer {
		t.Helper()
		st, body := adminCall(t, g, "GET", "/admin/spend?"+query, "")
		var a spendAnswer
		if err := json.Unmarshal(body, &a); st != 200 || err != nil {
			t.Fatalf("GET /admin/spend?%s: %d %v %s", query, st, err, body)
		}
		return a
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 900), chromedp.UserDataDir(t.TempDir()))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	drawn := 0
	// show does what the form needs and waits for the table drawn anew.
	show := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		drawn++
		run(what, append(actions, chromedp.WaitReady(chromedp.CSS(fmt.Sprintf(`#report[data-rendered="%d"]`, drawn))))...)
	}
	type table struct {
		Rows  []spendShown `json:"rows"`
		Total spendShown   `json:"total"`
		Note  string       `json:"note"`
		More  bool         `json:"more"`
	}
	shown := func() table {
		t.Helper()
		tb, err := chromedp.Run(ctx, chromedp.Evaluate[table](readSpendTable))
		if err != nil {
			t.Fatal(err)
		}
		return tb
	}
	// same says where the page and the API's answer differ.
	same := func(what string, tb table, a spendAnswer) {
		t.Helper()
		if len(tb.Rows) != len(a.Data) {
			t.Fatalf("%s: the page shows %d rows %+v, the API %d %+v", what, len(tb.Rows), tb.Rows, len(a.Data), a.Data)
		}
		for i, r := range a.Data {
			want := spendShown{Group: r.Group, Name: r.Name, Requests: r.Requests, Attempts: r.Attempts, Input: strconv.FormatInt(r.InputTokens, 10),
				Output: strconv.FormatInt(r.OutputTokens, 10), Cost: strconv.FormatFloat(r.CostUSD, 'f', 6, 64), Orphans: strconv.FormatFloat(r.OrphansUSD, 'f', 6, 64)}
			if tb.Rows[i] != want {
				t.Errorf("%s: row %d shows %+v, the API says %+v", what, i, tb.Rows[i], want)
			}
		}
		if tb.Total.Requests != a.Total.Requests || tb.Total.Attempts != a.Total.Attempts || tb.Total.Cost != strconv.FormatFloat(a.Total.CostUSD, 'f', 6, 64) {
			t.Errorf("%s: the total shows %+v, the API says %+v", what, tb.Total, a.Total)
		}
		if wantNote := map[bool]string{true: "Note: " + a.Note + ".", false: ""}[a.Note != ""]; tb.Note != wantNote {
			t.Errorf("%s: the note shown is %q, want %q", what, tb.Note, wantNote)
		}
		if tb.More != a.HasMore {
			t.Errorf("%s: more shown %v, the API's has_more %v", what, tb.More, a.HasMore)
		}
	}
	groupBy := chromedp.CSS(`#range select[name="group_by"]`)
	submit := chromedp.Click(chromedp.CSS(`#range button[type="submit"]`))
	run("open the spend page", chromedp.Navigate(g.url+"/ui/spend.html"), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="1"]`)),
		chromedp.SendKeys(chromedp.CSS("#key"), adminKey))
	show("use the admin key", chromedp.Click(chromedp.CSS("#keyform button")))
	same("by model", shown(), report("group_by=model"))
	run("the chart", chromedp.WaitVisible(chromedp.CSS(`#chart rect.bar[data-model="chat"]`)))

	show("group by tag", chromedp.SetValue(groupBy, "tag"), submit)
	byTag := report("group_by=tag")
	if len(byTag.Data) != 4 || byTag.Total.Requests != 6 || byTag.Note == "" {
		t.Fatalf("the API by tag: %+v", byTag)
	}
	tb := shown()
	same("by tag", tb, byTag)
	sum := 0
	for _, r := range tb.Rows {
		sum += r.Requests
	}
	if sum <= tb.Total.Requests {
		t.Fatalf("the tag rows shown count %d requests, the total %d: no request with two tags", sum, tb.Total.Requests)
	}

	show("filter by user", chromedp.SetValue(chromedp.CSS(`#range input[name="user"]`), "ana"), submit)
	anas := report("group_by=tag&user=ana")
	if anas.Total.Requests != 3 || len(anas.Data) != 3 {
		t.Fatalf("the API by tag for ana: %+v", anas)
	}
	same("by tag for ana", shown(), anas)
	dir := os.Getenv("ONCEGATE_SCREENSHOT_DIR") // the page as shown: a test artefact
	if dir == "" {
		dir = t.TempDir()
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "spend-by-tag.png"), shot, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", filepath.Join(dir, "spend-by-tag.png"))

	show("two rows a page", chromedp.SetValue(chromedp.CSS(`#range input[name="limit"]`), "2"), submit)
	first := report("group_by=tag&user=ana&limit=2")
	if !first.HasMore || len(first.Data) != 2 {
		t.Fatalf("the API's first page: %+v", first)
	}
	same("the first page", shown(), first)
	show("more", chromedp.Click(chromedp.CSS("#more")))
	same("both pages", shown(), anas)

	// chromedp's SetValue cannot set "": the form is cleared by a script.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const f = document.querySelector("#range");
		f.elements.user.value = ""; f.elements.limit.value = "100"; return true; })()`)); err != nil {
		t.Fatal(err)
	}
	show("group by key", chromedp.SetValue(groupBy, "key"), submit)
	byKey := report("group_by=key")
	tb = shown()
	same("by key", tb, byKey)
	names := map[string]bool{}
	for _, r := range tb.Rows {
		names[r.Name] = true
	}
	if !names["search-web"] || !names["invoice-bot"] {
		t.Fatalf("grouped by key, the names shown: %+v", tb.Rows)
	}
}
