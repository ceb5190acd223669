package gateway

import (
	"testing"
	"time"

	"github.com/google/uuid"
)

// A refused joiner's Retry-After: about as long again as the owner has
// run, at least a second, never past the owner's deadline.
func TestJoinRetryAfterFollowsTheOwnersProgress(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name          string
		ran, deadline time.Duration // the owner's age and what is left of its deadline
		want          int
	}{
		{"just started, a minute left", 100 * time.Millisecond, time.Minute, 1},
		{"ran 3.2 s, a minute left", 3200 * time.Millisecond, time.Minute, 4},
		{"ran 40 s, 5 s left", 40 * time.Second, 5 * time.Second, 5},
		{"its deadline passed", 70 * time.Second, -time.Second, 1},
		{"its start unknown", -1, 30 * time.Second, 30},
		{"a clock that disagrees", -time.Minute, 30 * time.Second, 30},
	} {
		started := now.Add(-tc.ran)
		if tc.ran == -1 {
			started = time.Time{}
		}
		if got := joinRetryAfter(started, now.Add(tc.deadline), now); got != tc.want {
			t.Errorf("%s: Retry-After %d, want %d", tc.name, got, tc.want)
		}
	}
}

// Another gateway's request started when its UUIDv7 id says.
func TestOwnerStartedFromTheRequestID(t *testing.T) {
	g := &Gateway{}
	before := time.Now().Truncate(time.Millisecond)
	id := uuid.Must(uuid.NewV7()).String()
	if got := g.ownerStarted(id); got.Before(before) || got.After(time.Now()) {
		t.Fatalf("started %v, want about %v", got, before)
	}
	if got := g.ownerStarted("not-a-uuid"); !got.IsZero() {
		t.Fatalf("started %v for an id that is no UUIDv7", got)
	}
}
