package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/oncegate/oncegate/internal/mock"
)

// chromium finds a headless browser: CI installs Debian's chromium.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("ONCEGATE_TEST_BROWSER") != "" {
		t.Fatal("no chromium on PATH, and CI installed one")
	}
	t.Skip("no chromium on PATH: apt-get install chromium")
	return ""
}

const consoleConfig = `
admin_key_env: ONCEGATE_E2E_ADMIN
tenants:
  - {id: e2e, api_key_env: ONCEGATE_E2E_KEY}
  - {id: other, api_key_env: ONCEGATE_E2E_OTHER}
providers:
  - {id: p1, type: openai, base_url: "MOCK/v1", timeouts: {connect: 1s, first_byte: 60s, idle: 60s}}
  - {id: p2, type: openai, base_url: "MOCK/v1", timeouts: {connect: 1s, first_byte: 60s, idle: 60s}}
routes:
  - {id: primary, provider: p1, model: primary-model, behavior_class: c, data_boundary: local, max_attempts: 2,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 1000, continuation: assistant_prefill}, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}}
  - {id: fallback, provider: p2, model: fallback-model, behavior_class: c, data_boundary: local, max_attempts: 2,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 1000, continuation: assistant_prefill}, price: {input_usd_per_mtok: 2, output_usd_per_mtok: 4}}
  - {id: openai-gpt-4o-mini-2024-07-18-eu-west-batch-fallback, provider: p2, model: fallback-model, behavior_class: c, data_boundary: local, max_attempts: 1,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 1000}, price: {input_usd_per_mtok: 2, output_usd_per_mtok: 4}}
models:
  - {name: chat, routes: [primary, fallback, openai-gpt-4o-mini-2024-07-18-eu-west-batch-fallback], retry: {max_attempts: 3, base_delay: 10ms, max_delay: 50ms, deadline: 60s}}
`

// The console in a real browser (chromedp driving chromium) 1,400 px
// wide, after a stream that broke mid-answer and was resumed, and a page
// of other requests: without a key it asks for one; the admin finds the
// request — its row names the route that answered and the date — its
// timeline has a bar per attempt labelled with input and output tokens
// apart and the visible-output boundary, its receipt opens, Verify says
// no drift; the live panel says how much retry budget is used and left
// and fits its column; a link to the request scrolls it into view; the
// other tenant's key cannot see it. The screenshot is a test artefact
// (ONCEGATE_SCREENSHOT=PATH keeps it); docs/console.png is
// TestConsoleLayoutInABrowser's at 1,280 px.
func TestConsoleInABrowser(t *testing.T) {
	browser := chromium(t)
	w := newWorld(t, mock.Config{Tokens: 12})
	if err := os.WriteFile(w.config, []byte(strings.ReplaceAll(consoleConfig, "MOCK", mockURL(t, w))), 0o644); err != nil {
		t.Fatal(err)
	}
	w.mock.SetScript(mock.Script{Rules: []mock.Rule{{Model: "primary-model", Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultDropAfter, After: 4}}}})
	g := w.start("ONCEGATE_E2E_ADMIN="+adminKey, "ONCEGATE_E2E_OTHER=sk-other-tenant")
	req := `{"model":"chat","stream":true,"messages":[{"role":"user","content":"show me a resume"}]}`
	res, body := postRaw(t, g.url+"/v1/chat/completions", apiKey, req)
	if res.StatusCode != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("the resumed stream: %d %s", res.StatusCode, body)
	}
	id, answeredBy := res.Header.Get("X-Oncegate-Request-Id"), res.Header.Get("X-Oncegate-Route")

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1400, 900), chromedp.UserDataDir(t.TempDir()))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	defer cancel()

	row := chromedp.CSS(`tr[data-id="` + id + `"]`)
	run := func(what string, f func() error) {
		t.Helper()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		return s
	}
	run("open the console with no key", func() error {
		return chromedp.Do(ctx, chromedp.Navigate(g.url+"/ui/"), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="1"]`)),
			chromedp.WaitVisible(chromedp.CSS("#nokey")), chromedp.WaitNotVisible(chromedp.CSS("#live")))
	})
	if prompt := text("#nokey"); !strings.Contains(prompt, "Enter an API key") || !strings.Contains(prompt, "admin key") {
		t.Fatalf("without a key the console says %q", prompt)
	}
	run("open the console as the admin and the request", func() error {
		return chromedp.Do(ctx,
			chromedp.SendKeys(chromedp.CSS("#key"), adminKey),
			chromedp.Click(chromedp.CSS("#keyform button")),
			chromedp.WaitVisible(row),
			chromedp.Click(row),
			chromedp.WaitVisible(chromedp.CSS("#timeline svg")))
	})
	count := func(sel string) int {
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+"`"+sel+"`"+`).length`))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if bars, boundaries := count("#timeline rect.attempt"), count("#timeline line.boundary"); bars != 2 || boundaries != 1 {
		t.Fatalf("the timeline has %d attempt bars and %d boundaries, want 2 and 1", bars, boundaries)
	}
	// The row names the route that answered, and the date as well as the time.
	if route := text(`tr[data-id="` + id + `"] td.route`); route != answeredBy {
		t.Fatalf("the row's route is %q, the answer came from %q", route, answeredBy)
	}
	if created := text(`tr[data-id="` + id + `"] td.created`); !regexp.MustCompile(`^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$`).MatchString(created) {
		t.Fatalf("the row's created is %q, want a date and a time", created)
	}
	// Each bar says its input and output tokens apart, beside emitted_tokens.
	labels, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#timeline text.label")].map((e) => e.textContent)`))
	if err != nil || len(labels) != 2 {
		t.Fatalf("the timeline's labels: %q %v", labels, err)
	}
	for i, label := range labels {
		if !regexp.MustCompile(`· in \d+ · out \d+ ·`).MatchString(label) || strings.Contains(label, " tok ") {
			t.Fatalf("attempt %d's label %q does not say its input and output tokens apart", i+1, label)
		}
	}
	// The live panel says what the retry budget has used and has left.
	run("wait for the live panel", func() error { return chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#livestats dd"))) })
	if live := text("#livestats"); !regexp.MustCompile(`retry budget\s*\d+ used of \d+ · \d+ left`).MatchString(live) {
		t.Fatalf("the live panel's retry budget: %q", live)
	}
	// At 1,400 px nothing in the live panel spills out of it, and nothing
	// makes the page wider than the window.
	spill, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		const live = document.querySelector("#live"), box = live.getBoundingClientRect();
		if (window.innerWidth !== 1400) return "the window is " + window.innerWidth + " px wide";
		if (live.scrollWidth > live.clientWidth) return "#live scrolls: " + live.scrollWidth + " > " + live.clientWidth;
		for (const e of live.querySelectorAll("*")) {
			const r = e.getBoundingClientRect();
			if (r.right > box.right + 0.5) return e.tagName + " " + JSON.stringify(e.textContent.slice(0, 40)) + " ends at " + r.right + " > " + box.right;
		}
		if (document.documentElement.scrollWidth > window.innerWidth) return "the page is " + document.documentElement.scrollWidth + " px wide";
		return "";
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if spill != "" {
		t.Fatalf("the layout overflows at 1,400 px: %s", spill)
	}
	receipt, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#receipt")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(receipt, `"request_id": "`+id+`"`) || !strings.Contains(receipt, `"purpose": "resume"`) {
		t.Fatal("the receipt shown is not the request's")
	}
	run("press Verify", func() error {
		return chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#verify")), chromedp.WaitVisible(chromedp.CSS("#verdict.ok")))
	})
	if verdict, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#verdict"))); verdict != "verified: no drift" {
		t.Fatalf("verify said %q", verdict)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dst := os.Getenv("ONCEGATE_SCREENSHOT")
	if dst == "" {
		dst = filepath.Join(t.TempDir(), "console.png")
	}
	if err := os.WriteFile(dst, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", dst, len(shot))

	// A link to the request opens it in view, though the list above it is
	// longer than the window.
	for i := range 30 { // a list longer than the window
		r, b := postRaw(t, g.url+"/v1/chat/completions", apiKey, `{"model":"chat","messages":[{"role":"user","content":"filler `+strconv.Itoa(i)+`"}]}`)
		if r.StatusCode != 200 {
			t.Fatalf("filler %d: %d %s", i, r.StatusCode, b)
		}
	}
	run("follow a link to the request", func() error {
		return chromedp.Do(ctx,
			chromedp.Navigate(g.url+"/ui/?link=1#request="+id),
			chromedp.WaitVisible(chromedp.CSS(`body[data-ready="1"]`)),
			chromedp.WaitVisible(chromedp.CSS("#timeline svg")))
	})
	view, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		const d = document.querySelector("#detail"), top = d.getBoundingClientRect().top;
		if (document.querySelector("#detailid").textContent !== "`+id+`") return "another request is open";
		if (d.offsetTop < window.innerHeight) return "the list is too short to test: the detail starts at " + d.offsetTop;
		if (top < 0 || top >= window.innerHeight) return "the detail is at " + top + ", outside the window's " + window.innerHeight + " px";
		return "";
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if view != "" {
		t.Fatalf("the linked request: %s", view)
	}

	// The other tenant sees neither the request nor its receipt.
	run("open the console as another tenant", func() error {
		return chromedp.Do(ctx,
			chromedp.Navigate(g.url+"/ui/?as=other#key=sk-other-tenant"),
			chromedp.WaitVisible(chromedp.CSS(`body[data-ready="1"]`)))
	})
	status, err := chromedp.Run(ctx, chromedp.Evaluate[int](`fetch("/v1/console/requests/`+id+`", {headers: {Authorization: "Bearer sk-other-tenant"}}).then(r => r.status)`,
		chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if listed := count(`tr[data-id="` + id + `"]`); listed != 0 || status != 404 {
		t.Fatalf("another tenant saw the request: listed %d, receipt status %d", listed, status)
	}
}

// postRaw posts body to url with a tenant key and reads the whole answer.
func postRaw(t *testing.T, url, key, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}
