package retry

import (
	"flag"
	"os"
	"testing"
)

// TestMain raises rapid's default of 100 checks per property to 1,000; an
// explicit -rapid.checks still wins.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue {
		_ = f.Value.Set("1000")
	}
	os.Exit(m.Run())
}
