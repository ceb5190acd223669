package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
)

func TestConformance(t *testing.T) {
	var path string
	ledgertest.Run(t, func(t *testing.T, reopen bool) ledger.Store {
		if !reopen {
			path = filepath.Join(t.TempDir(), "ledger.db")
		}
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// TestOneProcessAtATime: a second writer on the same file is refused
// before it touches anything (it would settle the first one's requests in
// flight), while a reader may look.
func TestOneProcessAtATime(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	rec := &ledger.Record{Identity: "k:live", RequestID: "live", Tenant: "acme", State: ledger.InProgress, Owner: "first",
		Generation: 1, LeaseUntil: now.Add(time.Minute), CreatedAt: now}
	if _, _, err := s.Claim(ctx, rec, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "pid ") {
		t.Fatalf("a second writer: %v, want ErrLocked naming the holder", err)
	}
	ro, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if r, err := ro.Get(ctx, "k:live"); err != nil || r.State != ledger.InProgress || !r.LeaseUntil.Equal(rec.LeaseUntil.UTC()) {
		t.Fatalf("the reader sees %+v %v; the writer's live lease must be untouched", r, err)
	}
	if _, err := ro.Expire(ctx, now); !errors.Is(err, ledger.ErrReadOnly) {
		t.Fatalf("a write through the reader: %v", err)
	}
	if _, err := OpenReadOnly(filepath.Join(t.TempDir(), "missing.db")); err == nil {
		t.Fatal("a reader created a missing database")
	}
}

// TestReopenEndsTheLeasesOfTheProcessBefore: whoever opens the file holds
// its lock, so every request still in progress belongs to a process that
// is gone; recovery settles them at once, not when their leases lapse.
func TestReopenEndsTheLeasesOfTheProcessBefore(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rec := &ledger.Record{Identity: "k:x", RequestID: "x", Tenant: "acme", State: ledger.InProgress, Owner: "gone",
		Generation: 1, LeaseUntil: now.Add(time.Hour), CreatedAt: now}
	if _, _, err := s.Claim(ctx, rec, []ledger.Event{{RequestID: "x", Seq: 1, Generation: 1, Type: ledger.EvDispatch, At: now}}); err != nil {
		t.Fatal(err)
	}
	if lapsed, err := s.Lapsed(ctx, now); err != nil || len(lapsed) != 0 {
		t.Fatalf("a live lease lapsed: %v %v", lapsed, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if lapsed, err := s.Lapsed(ctx, now); err != nil || len(lapsed) != 1 {
		t.Fatalf("after a reopen: lapsed %v %v", lapsed, err)
	}
}
