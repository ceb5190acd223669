package policy_test

import (
	"os"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/config"
)

// An alias's keyless_join is its own when set, unset otherwise; a value
// that is not true or false is an error naming its position.
func TestAnAliasKeylessJoin(t *testing.T) {
	src, err := os.ReadFile("../../examples/oncegate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	set := strings.Replace(string(src), "  - name: chat\n", "  - name: chat\n    keyless_join: false\n", 1)
	if set == string(src) {
		t.Fatal("the example has no alias chat")
	}
	p := mustCompile(t, "a.yaml", set)
	if j := p.Alias("chat").KeylessJoin; j == nil || *j {
		t.Fatalf("chat's keyless_join: %v, want false", j)
	}
	if j := p.Alias("chat-private").KeylessJoin; j != nil {
		t.Fatalf("chat-private's keyless_join: %v, want unset", *j)
	}
	bad := strings.Replace(string(src), "  - name: chat\n", "  - name: chat\n    keyless_join: sometimes\n", 1)
	_, err = config.Parse("bad.yaml", []byte(bad))
	if err == nil || !strings.Contains(err.Error(), "keyless_join") || !strings.Contains(err.Error(), "bad.yaml:") {
		t.Fatalf("keyless_join: sometimes: %v", err)
	}
	t.Log(err)
}
