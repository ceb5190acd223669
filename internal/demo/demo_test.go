package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The demo plays the incident and its own invariants hold: the re-POST
// joined, the user read the one expected answer, the receipt verifies and
// its bill equals the provider's count.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	if err := Run(context.Background(), &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"X-Oncegate-Dedup: joined", "attempt 3 → primary (resume): ok", "verify: OK",
		"one answer, never restarted", "it restarted mid-answer", "naive stack"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
