package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/oncegate/oncegate/internal/mock"
)

// layoutProblems is a script that reads the console's layout from the
// DOM and says what a reader of a laptop's screen would miss: a page
// wider than the window, a requests table or live panel that scrolls
// sideways, a cost cell outside the window or clipped, a route name
// broken over more than two lines or cut without an ellipsis and a title
// that names it whole. "" when there is nothing.
const layoutProblems = `(() => {
	const out = [], vw = document.documentElement.clientWidth;
	const say = (e) => JSON.stringify(e.textContent.slice(0, 60));
	if (document.documentElement.scrollWidth > window.innerWidth)
		out.push("the page is " + document.documentElement.scrollWidth + " px wide in a " + window.innerWidth + " px window");
	for (const s of document.querySelectorAll("#live, #list"))
		if (s.scrollWidth > s.clientWidth) out.push("#" + s.id + " scrolls sideways: " + s.scrollWidth + " > " + s.clientWidth + " px");
	const costs = document.querySelectorAll("#requests tbody td:last-child");
	if (costs.length === 0) out.push("no cost cells");
	for (const c of costs) { // the first that is not shown says it
		const r = c.getBoundingClientRect(), box = c.closest("section").getBoundingClientRect();
		if (r.width === 0 || getComputedStyle(c).visibility !== "visible") out.push("the cost cell " + say(c) + " is not shown");
		else if (r.right > vw + 0.5 || r.right > box.right + 0.5)
			out.push("the cost cell " + say(c) + " ends at " + r.right + " px, the window at " + vw + " and its panel at " + box.right);
		else if (c.scrollWidth > c.clientWidth) out.push("the cost cell " + say(c) + " is clipped");
		else continue;
		break;
	}
	const routes = [...document.querySelectorAll("#breakers tbody td:first-child, #requests tbody td:nth-child(5)")];
	if (!document.querySelector("#breakers tbody td")) out.push("no routes in the live panel");
	for (const c of routes) {
		const st = getComputedStyle(c), line = parseFloat(st.lineHeight) || 1.4 * parseFloat(st.fontSize);
		const h = c.getBoundingClientRect().height - parseFloat(st.paddingTop) - parseFloat(st.paddingBottom);
		if (h > 2.5 * line) out.push("the route " + say(c) + " takes " + Math.round(h / line) + " lines");
		else if (c.scrollWidth > c.clientWidth && !(st.textOverflow === "ellipsis" && c.title === c.textContent))
			out.push("the route " + say(c) + " is cut (" + c.scrollWidth + " > " + c.clientWidth + " px) without an ellipsis and a title");
	}
	return out.join("; ");
})()`

// The console laid out for a laptop and a desk: at 1,280 × 900 and at
// 1,920 × 1,080, after real traffic — a stream resumed on another route,
// requests answered by a route with a 52-letter name, a page of others —
// every column of the requests table is in the window, the cost included,
// with no sideways scrolling of the page or its panels, and no route name
// in the live panel or the table is broken letter by letter or cut
// without its whole name in a title. The keys and spend pages, which
// share the style sheet, fit 1,280 px too. The screenshots are test
// artefacts (ONCEGATE_SCREENSHOT_DIR=DIR keeps them: docs/console.png is
// the 1,280 one).
func TestConsoleLayoutInABrowser(t *testing.T) {
	browser := chromium(t)
	w := newWorld(t, mock.Config{Tokens: 12})
	const longRoute = "openai-gpt-4o-mini-2024-07-18-eu-west-batch-fallback"
	config := strings.ReplaceAll(consoleConfig, "MOCK", mockURL(t, w)) + "  - {name: eu-batch-summaries, routes: [" + longRoute + "]}\n"
	if err := os.WriteFile(w.config, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	w.mock.SetScript(mock.Script{Rules: []mock.Rule{{Model: "primary-model", Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultDropAfter, After: 4}}}})
	g := w.start("ONCEGATE_E2E_ADMIN="+adminKey, "ONCEGATE_E2E_OTHER=sk-other-tenant")
	res, body := postRaw(t, g.url+"/v1/chat/completions", apiKey, `{"model":"chat","stream":true,"messages":[{"role":"user","content":"show me a resume"}]}`)
	if res.StatusCode != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("the resumed stream: %d %s", res.StatusCode, body)
	}
	id := res.Header.Get("X-Oncegate-Request-Id")
	for i := range 12 {
		model, key := "chat", apiKey
		if i%3 == 0 {
			model = "eu-batch-summaries"
		}
		if i%4 == 1 {
			key = "sk-other-tenant"
		}
		r, b := postRaw(t, g.url+"/v1/chat/completions", key, `{"model":"`+model+`","messages":[{"role":"user","content":"traffic `+strconv.Itoa(i)+`"}]}`)
		if r.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, r.StatusCode, b)
		}
		if model != "chat" && r.Header.Get("X-Oncegate-Route") != longRoute {
			t.Fatalf("request %d was answered by %q, not %q", i, r.Header.Get("X-Oncegate-Route"), longRoute)
		}
	}
	issueOn(t, g, `{"tenant":"e2e","name":"laptop-layout-check","budget":{"cost_usd_per_day":5}}`)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 900), chromedp.UserDataDir(t.TempDir()))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	dir := os.Getenv("ONCEGATE_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	row := chromedp.CSS(`tr[data-id="` + id + `"]`)
	run("open the console as the admin", chromedp.Navigate(g.url+"/ui/#key="+adminKey), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="1"]`)),
		chromedp.WaitVisible(row), chromedp.WaitVisible(chromedp.CSS("#breakers tbody tr")))
	run("open the resumed request and verify it", chromedp.Click(row), chromedp.WaitVisible(chromedp.CSS("#timeline svg")),
		chromedp.Click(chromedp.CSS("#verify")), chromedp.WaitVisible(chromedp.CSS("#verdict.ok")))
	for _, size := range []struct{ w, h int64 }{{1280, 900}, {1920, 1080}} {
		run(fmt.Sprintf("a %d × %d window", size.w, size.h), chromedp.EmulateViewport(size.w, size.h), chromedp.ScrollIntoView(chromedp.CSS("body")))
		width, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.innerWidth`))
		if err != nil || width != int(size.w) {
			t.Fatalf("the window is %d px wide (%v), want %d", width, err, size.w)
		}
		problems, err := chromedp.Run(ctx, chromedp.Evaluate[string](layoutProblems))
		if err != nil {
			t.Fatal(err)
		}
		shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, fmt.Sprintf("console-%d.png", size.w))
		if err := os.WriteFile(path, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot at %d × %d: %s (%d bytes)", size.w, size.h, path, len(shot))
		if problems != "" {
			t.Errorf("at %d × %d: %s", size.w, size.h, problems)
		}
	}

	// The pages that share the style sheet fit a laptop's window too.
	run("a 1,280 px window", chromedp.EmulateViewport(1280, 900))
	for _, page := range []struct{ path, ready string }{{"keys.html", "#keytable tbody tr"}, {"spend.html", "#chart svg"}} {
		run("open "+page.path, chromedp.Navigate(g.url+"/ui/"+page.path), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="1"]`)),
			chromedp.WaitVisible(chromedp.CSS(page.ready)))
		wide, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
			const d = document.documentElement;
			if (d.scrollWidth > window.innerWidth) return "the page is " + d.scrollWidth + " px wide in a " + window.innerWidth + " px window";
			for (const s of document.querySelectorAll("section"))
				if (s.scrollWidth > s.clientWidth) return "#" + s.id + " scrolls sideways: " + s.scrollWidth + " > " + s.clientWidth + " px";
			return "";
		})()`))
		if err != nil {
			t.Fatal(err)
		}
		shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, strings.TrimSuffix(page.path, ".html")+"-1280.png"), shot, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
		if wide != "" {
			t.Errorf("%s at 1,280 px: %s", page.path, wide)
		}
	}
}
