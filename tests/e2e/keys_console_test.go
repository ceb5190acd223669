package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/oncegate/oncegate/internal/mock"
)

// The keys and spend pages in a real browser: the admin issues a key
// (its secret shown once), the key answers a request, the list shows its
// limits and its spend per period (day, month, total) against them; Rotate shows a new secret and
// Revoke refuses it; the spend page draws a bar for today's model and
// the totals per model.
func TestKeysAndSpendPagesInABrowser(t *testing.T) {
	browser := chromium(t)
	w := newWorld(t, mock.Config{Tokens: 12})
	if err := os.WriteFile(w.config, []byte(strings.ReplaceAll(consoleConfig, "MOCK", mockURL(t, w))), 0o644); err != nil {
		t.Fatal(err)
	}
	g := w.start("ONCEGATE_E2E_ADMIN="+adminKey, "ONCEGATE_E2E_OTHER=sk-other-tenant")
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1400, 900), chromedp.UserDataDir(t.TempDir()))
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
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		return s
	}
	run("issue a key", chromedp.Navigate(g.url+"/ui/keys.html"), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="1"]`)),
		chromedp.SendKeys(chromedp.CSS("#key"), adminKey), chromedp.Click(chromedp.CSS("#keyform button")),
		chromedp.SendKeys(chromedp.CSS(`#issueform input[name="tenant"]`), "e2e"),
		chromedp.SendKeys(chromedp.CSS(`#issueform input[name="name"]`), "browser-app"),
		chromedp.SendKeys(chromedp.CSS(`#issueform input[name="cost_usd_per_day"]`), "1"),
		chromedp.SendKeys(chromedp.CSS(`#issueform input[name="cost_usd_total"]`), "5"),
		chromedp.Click(chromedp.CSS("#issueform button")), chromedp.WaitVisible(chromedp.CSS("#secret")),
		chromedp.WaitVisible(chromedp.CSS(`#keytable tbody tr`)))
	secret := text("#secretvalue")
	if !strings.HasPrefix(secret, "og-") || len(secret) != 46 {
		t.Fatalf("the secret shown: %q", secret)
	}
	res, body := postRaw(t, g.url+"/v1/chat/completions", secret, `{"model":"chat","messages":[{"role":"user","content":"from the browser's key"}]}`)
	if res.StatusCode != 200 {
		t.Fatalf("a request with the issued key: %d %s", res.StatusCode, body)
	}
	run("reload the list", chromedp.Navigate(g.url+"/ui/keys.html"), chromedp.WaitVisible(chromedp.CSS(`#keytable tbody tr td.status`)))
	if limits, spend := text("#keytable tbody tr td.limits"), text("#keytable tbody tr td.spend"); !strings.Contains(limits, "$1/day") ||
		!strings.Contains(limits, "$5 in total") || !strings.Contains(spend, "of $1") || !strings.Contains(spend, "of $5") ||
		!strings.Contains(spend, "month $") || strings.Contains(spend, "day $0.000000") || strings.Contains(spend, "total $0.000000") {
		t.Fatalf("the key's row: limits %q, spend %q", limits, spend)
	}
	// Rotating draws the list again: the revoke button clicked next must
	// be the new drawing's, not one about to be replaced.
	drawn, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("#keytable"), "data-rendered"))
	if err != nil || !drawn.Exists {
		t.Fatalf("the list's drawings: %+v %v", drawn, err)
	}
	n, _ := strconv.Atoi(drawn.Value)
	run("rotate", chromedp.Click(chromedp.CSS("#keytable button.rotate")), chromedp.WaitVisible(chromedp.CSS("#secret")),
		chromedp.WaitReady(chromedp.CSS(fmt.Sprintf(`#keytable[data-rendered="%d"]`, n+1))))
	var rotated string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if rotated = text("#secretvalue"); rotated != secret {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if rotated == secret || !strings.HasPrefix(rotated, "og-") {
		t.Fatalf("rotate showed %q", rotated)
	}
	run("revoke", chromedp.Click(chromedp.CSS("#keytable button.revoke")), chromedp.WaitVisible(chromedp.CSS("#keytable td.s-revoked")))
	if res, _ := postRaw(t, g.url+"/v1/chat/completions", rotated, `{"model":"chat","messages":[{"role":"user","content":"revoked"}]}`); res.StatusCode != 401 {
		t.Fatalf("the revoked key: %d", res.StatusCode)
	}
	run("the spend page", chromedp.Navigate(g.url+"/ui/spend.html"), chromedp.WaitVisible(chromedp.CSS(`#chart rect.bar[data-model="chat"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#report tr[data-group="chat"]`)))
	if cost := text(`#report tr[data-group="chat"] td.cost`); cost == "" || cost == "0.000000" {
		t.Fatalf("the spend page's cost for chat: %q", cost)
	}
}
