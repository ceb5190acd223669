package ledgerbench

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/intentlog"
)

func openLogStore(t *testing.T) (*LogStore, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "intent.log")
	l, _, err := intentlog.Open(path, intentlog.Options{}, func([]byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	return NewLogStore(l, nil), path
}

// What the measured prototype costs is what a store that keeps Claim's
// one creation per identity and Finish's fence costs: it keeps them.
func TestLogStoreCreatesOncePerIdentityAndFencesFinish(t *testing.T) {
	st, path := openLogStore(t)
	ctx := context.Background()
	var created atomic.Int64
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := string(rune('a' + i))
			rec := &ledger.Record{Identity: "k:same", RequestID: id, State: ledger.InProgress, Generation: 1}
			existing, ok, err := st.Claim(ctx, rec, []ledger.Event{{RequestID: id, Seq: 1, Generation: 1, Type: ledger.EvCreated}})
			switch {
			case err != nil:
				t.Error(err)
			case ok:
				created.Add(1)
			case existing == nil || existing.Identity != "k:same":
				t.Errorf("claim not created returned %+v", existing)
			}
		}()
	}
	wg.Wait()
	if created.Load() != 1 {
		t.Fatalf("%d claims of one identity created it", created.Load())
	}
	existing, _, _ := st.Claim(ctx, &ledger.Record{Identity: "k:same", RequestID: "late"}, nil)
	owner := existing.RequestID
	if err := st.Finish(ctx, &ledger.Finish{Identity: "k:same", RequestID: owner, Generation: 2, State: ledger.Succeeded}); !errors.Is(err, ledger.ErrStaleGeneration) {
		t.Errorf("finish at another generation: %v", err)
	}
	if err := st.Finish(ctx, &ledger.Finish{Identity: "k:same", RequestID: "late", Generation: 1, State: ledger.Succeeded}); !errors.Is(err, ledger.ErrStaleGeneration) {
		t.Errorf("finish by a request that does not hold the identity: %v", err)
	}
	if err := st.Finish(ctx, &ledger.Finish{Identity: "k:same", RequestID: owner, Generation: 1, State: ledger.Succeeded, Tenant: "acme", Charge: 5}); err != nil {
		t.Fatal(err)
	}
	if err := st.Finish(ctx, &ledger.Finish{Identity: "k:same", RequestID: owner, Generation: 1, State: ledger.Succeeded}); !errors.Is(err, ledger.ErrFinished) {
		t.Errorf("second finish: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	// The log holds the one claim and the one finish, in that order.
	var kinds []byte
	if _, _, err := intentlog.Open(path, intentlog.Options{}, func(rec []byte) error {
		kinds = append(kinds, rec[0])
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if string(kinds) != "CF" {
		t.Fatalf("log holds %q, want a claim and a finish", kinds)
	}
}

// A claim whose append fails creates nothing: the identity can be claimed
// again, and a finish for it is refused.
func TestLogStoreClaimThatFailsLeavesNoRecord(t *testing.T) {
	st, _ := openLogStore(t)
	ctx := context.Background()
	if err := st.log.Close(); err != nil {
		t.Fatal(err)
	}
	rec := &ledger.Record{Identity: "k:x", RequestID: "r1", State: ledger.InProgress, Generation: 1}
	if _, _, err := st.Claim(ctx, rec, nil); err == nil {
		t.Fatal("claim on a closed log succeeded")
	}
	if err := st.Finish(ctx, &ledger.Finish{Identity: "k:x", RequestID: "r1", Generation: 1, State: ledger.Succeeded}); !errors.Is(err, ledger.ErrStaleGeneration) {
		t.Fatalf("finish of a claim that failed: %v", err)
	}
}
