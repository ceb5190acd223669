package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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
models:
  - {name: chat, routes: [primary, fallback], retry: {max_attempts: 3, base_delay: 10ms, max_delay: 50ms, deadline: 60s}}
`

// The console in a real browser (chromedp driving chromium), after a
// stream that broke mid-answer and was resumed on the fallback: the
// admin finds the request, its timeline has a bar per attempt and the
// visible-output boundary, its receipt opens, Verify says no drift; the
// other tenant's key cannot see it. The screenshot is a test artefact
// (ONCEGATE_SCREENSHOT=PATH keeps it: docs/console.png was made so).
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
	id := res.Header.Get("X-Oncegate-Request-Id")

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
	run("open the console as the admin and the request", func() error {
		return chromedp.Do(ctx,
			chromedp.Navigate(g.url+"/ui/"),
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
