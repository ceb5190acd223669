package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/coord/redis/redistest"
	"github.com/oncegate/oncegate/internal/ledger/postgres/pgtest"
)

// withStores rewrites the replicated example to use the given store and
// coordination.
func withStores(t *testing.T, store, coordination string) string {
	t.Helper()
	b, err := os.ReadFile("../../examples/replicated.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := regexp.MustCompile(`(?m)^store: .*$`).ReplaceAllLiteralString(string(b), "store: \""+store+"\"")
	s = regexp.MustCompile(`(?m)^coordination: .*$`).ReplaceAllLiteralString(s, "coordination: \""+coordination+"\"")
	path := filepath.Join(t.TempDir(), "replicated.yaml")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// check --connect reaches the store and the coordination and says what
// they are; migrate brings the store to this binary's schema.
func TestCheckConnectAndMigrate(t *testing.T) {
	cfg := withStores(t, pgtest.URL(t), redistest.URL(t))
	code, out, errOut := runCLI("check", "--connect", "--config", cfg)
	if code != 0 || !strings.Contains(out, "PostgreSQL 1") || !strings.Contains(out, "schema version 0 of") || !strings.Contains(out, ": Redis ") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runCLI("migrate", "--config", cfg)
	if code != 0 || !strings.Contains(out, "migration(s) applied now") {
		t.Fatalf("migrate: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, out, _ = runCLI("check", "--connect", "--config", cfg); !strings.Contains(out, "(up to date)") {
		t.Fatalf("after migrate:\n%s", out)
	}
}

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// check --connect reaches a Redis Sentinel's master and a Redis Cluster,
// and says what each is; an unreachable cluster fails it, named.
func TestCheckConnectReachesSentinelAndCluster(t *testing.T) {
	store := pgtest.URL(t)
	for _, c := range []struct{ url, want string }{
		{redistest.SentinelURL(t), ": master oncegate-test (master), 0 replica(s) connected: Redis 7"},
		{redistest.ClusterURL(t), ": cluster of 3 shard(s), 3 node(s), state ok: Redis 7"},
	} {
		code, out, errOut := runCLI("check", "--connect", "--config", withStores(t, store, c.url))
		if code != 0 || !strings.Contains(out, c.want) {
			t.Fatalf("%s: exit %d\n%s\n%s", c.url, code, out, errOut)
		}
	}
	down := "redis+cluster://127.0.0.1:9,127.0.0.1:10"
	code, out, errOut := runCLI("check", "--connect", "--config", withStores(t, store, down))
	if code != 1 || !strings.Contains(errOut, "coordination "+down) || strings.Contains(out, "configuration OK") {
		t.Fatalf("an unreachable cluster: exit %d\n%s\n%s", code, out, errOut)
	}
}

// Unreachable parts fail check --connect, each named.
func TestCheckConnectNamesWhatIsUnreachable(t *testing.T) {
	cfg := withStores(t, "postgres://postgres@127.0.0.1:9/test?sslmode=disable&connect_timeout=2", "redis://127.0.0.1:9/0")
	code, out, errOut := runCLI("check", "--connect", "--config", cfg)
	if code != 1 || !strings.Contains(errOut, "store postgres://postgres@127.0.0.1:9/test") || !strings.Contains(errOut, "coordination redis://127.0.0.1:9/0") ||
		strings.Contains(out, "configuration OK") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
}

// serve refuses a coordination or store it cannot serve before it opens
// anything (no dead options: a flag is checked like the file).
func TestServeRefusesWhatItCannotServe(t *testing.T) {
	t.Setenv("ONCEGATE_KEY_DEV", "sk-dev")
	t.Setenv("ONCEGATE_ADMIN_KEY", "sk-admin")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--coordination", "etcd://x"}, `coordination "etcd://x": want local or redis://`},
		{[]string{"--coordination", "redis://127.0.0.1:9/0"}, "can be opened by one process only"},
		{[]string{"--coordination", "redis+cluster://127.0.0.1:7000,127.0.0.1"}, `host 2 of 2 is "127.0.0.1": want host:port`},
		{[]string{"--coordination", "redis+cluster://127.0.0.1:7000,127.0.0.1:7001"}, "can be opened by one process only"},
		{[]string{"--store", "mysql://x"}, `store "mysql://x": want sqlite://PATH, postgres://… or memory://`},
	} {
		code, _, errOut := runCLI(append([]string{"serve", "--config", "../../examples/quickstart.yaml", "--listen", "127.0.0.1:0"}, c.args...)...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("serve %v: exit %d, %s", c.args, code, errOut)
		}
	}
}
