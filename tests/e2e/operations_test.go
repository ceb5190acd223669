package e2e

import (
	"net/http"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/mock"
)

// metrics_listen serves /metrics with no key on its own address; the API
// port answers it to the admin key only.
func TestMetricsListen(t *testing.T) {
	w := newWorld(t, mock.Config{})
	cfg, err := os.ReadFile(w.config)
	if err != nil {
		t.Fatal(err)
	}
	s := "metrics_listen: 127.0.0.1:0\nadmin_key_env: ONCEGATE_E2E_ADMIN\n" + string(cfg)
	if err := os.WriteFile(w.config, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	g := w.start("ONCEGATE_E2E_ADMIN=" + adminKey)
	addr := g.stdout.wait(t, regexp.MustCompile(`oncegate metrics on (http://\S+)`), 10*time.Second)[1]
	get := func(url, key string) int {
		req, _ := http.NewRequest("GET", url, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if st := get(addr, ""); st != 200 {
		t.Fatalf("metrics_listen: %d", st)
	}
	if st := get(g.url+"/metrics", ""); st != 401 {
		t.Fatalf("the API port without a key: %d", st)
	}
	if st := get(g.url+"/metrics", apiKey); st != 401 {
		t.Fatalf("the API port with a tenant's key: %d", st)
	}
	if st := get(g.url+"/metrics", adminKey); st != 200 {
		t.Fatalf("the API port with the admin key: %d", st)
	}
}
