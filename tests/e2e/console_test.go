package e2e

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

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

// The console, rendered by a real browser from the binary's embedded
// assets: the list of logical requests, a request's timeline with a bar
// per attempt and the visible-output boundary, its receipt, the verify
// verdict, and the live panel's breakers.
func TestConsoleInABrowser(t *testing.T) {
	browser := chromium(t)
	w := newWorld(t, mock.Config{})
	cfg, err := os.ReadFile(w.config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.config, []byte("admin_key_env: ONCEGATE_E2E_ADMIN\n"+string(cfg)), 0o644); err != nil {
		t.Fatal(err)
	}
	g := w.start("ONCEGATE_E2E_ADMIN=" + adminKey)
	w.mock.SetScript(mock.Script{Rules: []mock.Rule{{Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultStatus, Status: 503}}}})
	res, _, err := g.post(context.Background(), "", "render me")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("request: %v %v", res, err)
	}
	id := res.Header.Get("X-Oncegate-Request-Id")
	cmd := exec.Command(browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=15000", "--dump-dom",
		g.url+"/ui/#key="+adminKey+"&request="+id+"&verify=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	dom := string(out)
	checks := map[string]bool{
		`data-ready="1"`:          strings.Contains(dom, `data-ready="1"`),
		"the request in the list": strings.Contains(dom, `data-id="`+id+`"`),
		"two attempt bars":        len(regexp.MustCompile(`<rect class="attempt `).FindAllString(dom, -1)) == 2,
		"a backoff gap":           strings.Contains(dom, `<rect class="gap"`),
		"the boundary":            strings.Contains(dom, `class="boundary"`),
		"the receipt":             strings.Contains(dom, `"request_id": "`+id+`"`),
		"the verdict":             strings.Contains(dom, "verified: no drift"),
		"the live breakers":       strings.Contains(dom, "<td>mock</td>"),
		"no key in the page":      !strings.Contains(dom, adminKey),
	}
	for what, ok := range checks {
		if !ok {
			t.Errorf("the console lacks %s", what)
		}
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}
}
