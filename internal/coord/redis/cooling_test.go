package redis

import (
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/coord/redis/redistest"
	"github.com/oncegate/oncegate/internal/load"
)

// A route one gateway found cooling (a long rate-limit hint,
// docs/retries.md) cools on the other within a sync, whatever the
// route's strategy; and a cooling that ended is gone.
func testARoutesCoolingIsSharedAcrossGateways(t *testing.T, d redistest.Deployment) {
	a, b := pair(t, d.URL(t), 5*time.Second)
	limits := map[string]load.Limits{"east": {}, "west": {}}
	ta, tb := load.New(clock.System{}, limits), load.New(clock.System{}, limits)
	a.NewLoads(ta)
	b.NewLoads(tb)
	until := time.Now().Add(20 * time.Second).Truncate(time.Millisecond)
	ta.Cool("east", until)
	waitFor(t, "a's cooling in b's admission", func() bool { return tb.Cooling([]string{"east", "west"})["east"].Equal(until) })
	if c := tb.Cooling([]string{"east", "west"}); len(c) != 1 {
		t.Fatalf("only east cools: %v", c)
	}
	// b finds west cooling briefly: a learns it, and then that it ended.
	// A brief cooling may end before a sync on a loaded machine carries
	// it across: one a never saw is tried again, three times as long.
	seen := false
	for d := 300 * time.Millisecond; !seen && d < 30*time.Second; d *= 3 {
		end := time.Now().Add(d)
		tb.Cool("west", end)
		for !seen && time.Now().Before(end) {
			_, seen = ta.Cooling([]string{"west"})["west"]
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !seen {
		t.Fatal("b's cooling of west never reached a's admission, even lasting 24 s")
	}
	waitFor(t, "west's cooling ends", func() bool { _, ok := ta.Cooling([]string{"west"})["west"]; return !ok })
	if c := ta.Cooling([]string{"east"}); !c["east"].Equal(until) {
		t.Fatalf("east's cooling on a: %v", c)
	}
}
