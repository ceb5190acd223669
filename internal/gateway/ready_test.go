package gateway

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/mock"
)

// lockedBuffer is a log sink safe for the gateway's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// /readyz tells anyone whether the gateway is ready and which part is
// not; why (the driver's error, which names addresses and users) only
// the admin key reads, and the log says once.
func TestReadyzKeepsTheDetailForTheAdmin(t *testing.T) {
	t.Parallel()
	var f *faulty
	logs := &lockedBuffer{}
	inBubble(t, envOptions{mock: mock.Config{}, logs: logs, wrap: func(s ledger.Store) ledger.Store {
		f = &faulty{Store: s}
		return f
	}}, func(t *testing.T, e *env) {
		ready := func(key string) (int, string) {
			req, _ := http.NewRequest("GET", e.url+"/readyz", nil)
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			res, err := e.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			return res.StatusCode, string(b)
		}
		f.fail.Store(true)
		for _, key := range []string{"", keyAcme} {
			if st, body := ready(key); st != 503 || body != "store unavailable\n" {
				t.Fatalf("key %q: %d %q; want 503 and the status alone", key, st, body)
			}
		}
		if st, body := ready(keyAdmin); st != 503 || !strings.Contains(body, "store unavailable: "+errDiskFull.Error()) {
			t.Fatalf("the admin key: %d %q; want the detail", st, body)
		}
		if n := strings.Count(logs.String(), errDiskFull.Error()); n != 1 {
			t.Fatalf("the detail is in the log %d times, want once:\n%s", n, logs)
		}
		f.fail.Store(false)
		if st, body := ready(""); st != 200 || body != "ready\n" {
			t.Fatalf("after: %d %q", st, body)
		}
	})
}
