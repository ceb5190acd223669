package gateway

import (
	"runtime/debug"
	"testing"
)

func TestTuneGCDefaultsUnlessGOGCIsSet(t *testing.T) {
	was := debug.SetGCPercent(100)
	defer debug.SetGCPercent(was)
	env := map[string]string{}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }

	if got := TuneGC(lookup); got != DefaultGCPercent {
		t.Errorf("TuneGC without GOGC = %d; want %d", got, DefaultGCPercent)
	}
	if now := debug.SetGCPercent(100); now != DefaultGCPercent {
		t.Errorf("collector target after TuneGC without GOGC = %d; want %d", now, DefaultGCPercent)
	}

	for v, want := range map[string]int{"150": 150, "off": -1, "junk": 100} {
		env["GOGC"] = v
		if got := TuneGC(lookup); got != want {
			t.Errorf("TuneGC with GOGC=%s = %d; want %d", v, got, want)
		}
		if now := debug.SetGCPercent(100); now != 100 {
			t.Errorf("TuneGC with GOGC=%s changed the collector's target to %d; want it left to the runtime", v, now)
		}
	}
}
