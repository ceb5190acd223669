package gateway

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/jobs"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/mock"
)

// chatID sends a keyed chat request as the tenant of key and returns its
// request id.
func (e *env) chatID(key, idem string) string {
	e.t.Helper()
	res, body := e.postKey(key, "/v1/chat/completions", chatBody("chat", false), keyed(idem))
	if res.StatusCode != 200 {
		e.t.Fatalf("request %s: %d %s", idem, res.StatusCode, body)
	}
	return res.Header.Get("X-Oncegate-Request-Id")
}

// receiptStatus is GET /v1/receipts/{id}'s status and error code.
func (e *env) receiptStatus(id string) (int, string) {
	e.t.Helper()
	status, body := e.adminDo(keyAdmin, "GET", "/v1/receipts/"+id, "", nil)
	var eb struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal(body, &eb)
	return status, eb.Error.Code
}

// spendOn is the store's spend counters of a day: the tenants' and the
// virtual keys' (the month's budget is summed from the keys' days).
func (e *env) spendOn(day int64) map[string]int64 {
	e.t.Helper()
	out := map[string]int64{}
	tenants, err := e.store.Spend(context.Background(), day)
	if err != nil {
		e.t.Fatal(err)
	}
	keys, err := e.store.KeySpend(context.Background(), day, day)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range tenants {
		out["tenant "+k] = v
	}
	for k, v := range keys {
		out["key "+k] = v
	}
	return out
}

// Receipts and attempt events are deleted once their requests are older
// than ledger.receipt_retention and their idempotency records have
// expired: the receipt is then 404 receipt_not_found and the events are
// gone, while a newer request keeps both. Sweeping frees no budget: the
// day's spend of the tenant and of the virtual key stay as they were;
// the spend report, summed from receipts, has nothing left of the swept
// period.
func TestRetentionSweepsOldReceiptsAndEvents(t *testing.T) {
	t.Parallel()
	off := &clock.Offset{}
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}, clock: off,
		yaml: "idempotency: {retention: 30m}\nledger: {receipt_retention: 1h}\n"}, func(t *testing.T, e *env) {
		ctx := context.Background()
		vk := e.issue(`{"tenant":"acme","name":"retained","budget":{"cost_usd_per_month":100}}`)
		start := off.Now()
		old := []string{e.chatID(keyAcme, "old-1"), e.chatID(vk.Key, "old-2")}
		for _, id := range old {
			if st, code := e.receiptStatus(id); st != 200 {
				t.Fatalf("receipt %s before the sweep: %d %s", id, st, code)
			}
		}
		window := "/admin/spend?from=" + start.Add(-time.Minute).Format(time.RFC3339Nano) + "&to=" + start.Add(time.Minute).Format(time.RFC3339Nano)
		if n := e.spendRequests(window); n != 2 {
			t.Fatalf("the spend report counts %d requests before the sweep, want 2", n)
		}

		off.Advance(90 * time.Minute) // past both retentions
		fresh := e.chatID(keyAcme, "fresh")
		day := gw.Day(off.Now())
		spent := e.spendOn(day)
		if spent["tenant acme"] <= 0 || spent["key "+vk.ID] <= 0 {
			t.Fatalf("the requests charged nothing: %v", spent)
		}
		time.Sleep(jobs.RetentionEvery) // the job runs once
		synctest.Wait()

		for _, id := range old {
			if st, code := e.receiptStatus(id); st != http.StatusNotFound || code != api.CodeReceiptNotFound {
				t.Fatalf("receipt %s after the sweep: %d %s", id, st, code)
			}
			if evs, err := e.store.Events(ctx, id); err != nil || len(evs) != 0 {
				t.Fatalf("events of %s after the sweep: %d %v", id, len(evs), err)
			}
		}
		if st, code := e.receiptStatus(fresh); st != 200 {
			t.Fatalf("the newer receipt: %d %s", st, code)
		}
		if evs, err := e.store.Events(ctx, fresh); err != nil || len(evs) == 0 || evs[0].Type != ledger.EvCreated {
			t.Fatalf("events of the newer request: %v %v", evs, err)
		}
		if got := e.spendOn(day); !maps.Equal(got, spent) {
			t.Fatalf("the day's spend after the sweep: %v, was %v", got, spent)
		}
		if n := e.spendRequests(window); n != 0 {
			t.Fatalf("the spend report counts %d requests of the swept period", n)
		}
	})
}

// spendRequests is how many requests the admin spend report at path
// counts.
func (e *env) spendRequests(path string) int {
	e.t.Helper()
	var rep struct{ Data []admin.SpendRow }
	if st, body := e.adminDo(keyAdmin, "GET", path, "", &rep); st != 200 {
		e.t.Fatalf("%s: %d %s", path, st, body)
	}
	n := 0
	for _, r := range rep.Data {
		n += r.Requests
	}
	return n
}

// A receipt is kept as long as its idempotency record: a replay of the
// key may still be answered from the record and counted in the receipt.
// Once the record expires, the next run sweeps it.
func TestRetentionKeepsReceiptsWhileTheirRecordsLast(t *testing.T) {
	t.Parallel()
	off := &clock.Offset{}
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}, clock: off,
		yaml: "idempotency: {retention: 3h}\nledger: {receipt_retention: 1h}\n"}, func(t *testing.T, e *env) {
		id := e.chatID(keyAcme, "kept")
		off.Advance(2 * time.Hour) // past receipt_retention, not the key's
		time.Sleep(jobs.RetentionEvery)
		synctest.Wait()
		if st, code := e.receiptStatus(id); st != 200 {
			t.Fatalf("a receipt whose record is live: %d %s", st, code)
		}
		res, _ := e.post("/v1/chat/completions", chatBody("chat", false), keyed("kept"))
		if res.StatusCode != 200 || res.Header.Get("X-Oncegate-Dedup") != "replayed" || res.Header.Get("X-Oncegate-Request-Id") != id {
			t.Fatalf("the replay: %d %s %s", res.StatusCode, res.Header.Get("X-Oncegate-Dedup"), res.Header.Get("X-Oncegate-Request-Id"))
		}
		off.Advance(2 * time.Hour) // past the key's retention too
		time.Sleep(jobs.RetentionEvery)
		synctest.Wait()
		if st, code := e.receiptStatus(id); st != http.StatusNotFound || !strings.Contains(code, "receipt_not_found") {
			t.Fatalf("the receipt once its record expired: %d %s", st, code)
		}
	})
}
