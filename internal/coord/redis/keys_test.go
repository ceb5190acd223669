package redis

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/coord/redis/redistest"
)

// A key changed on one replica is heard of on the other, by id; the
// first read drops every key.
func testKeyFeedTellsTheOtherReplica(t *testing.T, d redistest.Deployment) {
	a, b := pair(t, d.URL(t), 5*time.Second)
	fa, fb := a.NewKeyFeed(), b.NewKeyFeed()
	heard := make(chan []string, 16)
	fb.Follow(func(ids []string, all bool) {
		if all {
			ids = []string{"*"}
		}
		heard <- ids
	})
	fa.Follow(func([]string, bool) {})
	// Wait for b's first read, so that what follows is a change to it.
	deadline := time.After(5 * time.Second)
	for {
		fb.mu.Lock()
		seen := fb.seen
		fb.mu.Unlock()
		if seen >= 0 {
			break
		}
		select {
		case <-deadline:
			t.Fatal("b never read the feed")
		case <-time.After(10 * time.Millisecond):
		}
	}
	// The first read drops every cached key: from before it, nothing is known.
	if ids := <-heard; !slices.Equal(ids, []string{"*"}) {
		t.Fatalf("the first read: %v, want every key", ids)
	}
	ctx := context.Background()
	for _, id := range []string{"key_1", "key_2"} {
		if err := fa.Changed(ctx, id); err != nil {
			t.Fatal(err)
		}
		select {
		case ids := <-heard:
			if !slices.Contains(ids, id) {
				t.Fatalf("b heard %v, want %s", ids, id)
			}
		case <-time.After(time.Second):
			t.Fatalf("b did not hear of %s within a second", id)
		}
	}
}
