package chaos_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/oncegate/oncegate/internal/chaos"
)

// TestShortSoak is CI's soak: 2,000 logical requests (CHAOS_REQUESTS
// overrides) through a gateway on SQLite killed three times, every
// invariant checked, none broken.
func TestShortSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/oncegate and runs a soak")
	}
	soak(t, 1, "")
}

// TestShortSoakThreeReplicas is the same through three gateways on
// PostgreSQL and a Redis of the soak's own: three kills of random
// replicas, and Redis restarted at the third.
func TestShortSoakThreeReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/oncegate and runs a soak")
	}
	pg := os.Getenv("ONCEGATE_TEST_POSTGRES")
	if pg == "" {
		t.Skip("ONCEGATE_TEST_POSTGRES is not set: no PostgreSQL for the replicas (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed: the soak restarts a Redis of its own")
	}
	soak(t, 3, pg)
}

func soak(t *testing.T, replicas int, pg string) {
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("CHAOS_REQUESTS")); err == nil && v > 0 {
		n = v
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "oncegate")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/oncegate/oncegate/cmd/oncegate").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var progress bytes.Buffer
	rep, err := chaos.Run(context.Background(), chaos.Config{Binary: bin, Dir: dir, Requests: n, Workers: 16, Kills: 3, Seed: 1, Progress: &progress,
		Replicas: replicas, Postgres: pg})
	if err != nil {
		t.Fatalf("soak: %v\n%s", err, progress.String())
	}
	var out bytes.Buffer
	rep.Print(&out)
	t.Log("\n" + out.String())
	if rep.Kills < 3 || rep.Requests < n || (replicas > 1 && rep.RedisRestarts < 1) {
		t.Fatalf("the soak ran %d requests with %d kills", rep.Requests, rep.Kills)
	}
	for _, row := range rep.Rows {
		if row.Checked == 0 {
			t.Errorf("%q checked nothing", row.Invariant)
		}
	}
	if v := rep.Violations(); v > 0 {
		if b, err := os.ReadFile(filepath.Join(dir, "gateway.log")); err == nil && len(b) > 4000 {
			t.Logf("gateway log (end):\n%s", b[len(b)-4000:])
		}
		t.Fatalf("%d violations", v)
	}
}
