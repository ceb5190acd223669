package main

import (
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// stage is one part of the request path, named by the functions whose
// samples (their own and their callees') are its cost.
type stage struct{ name, focus string }

// stages are the parts docs/performance.md budgets. A sample counts in
// the first stage whose functions are on its stack; what no stage claims
// is "other".
var stages = []stage{
	{"read the request (net/http server)", `net/http.\(\*conn\).readRequest`},
	{"parse and validate", `provider.ParseRequest|gateway.\(\*Gateway\).readRequest|provider.nativeOnly`},
	{"identity (canonical JSON, SHA-256, HMAC)", `internal/identity\.`},
	{"ledger (claim, events, finish, checkpoints)", `internal/ledger/`},
	{"upstream (build, send, read the answer)", `upstream.\(\*Client\)|net/http.\(\*persistConn\)|provider.BuildRequest|net/http.\(\*Transport\)`},
	{"relay (decode, encode for the client, write)", `provider.DecodeResponse|provider.ScanResponse|provider.\(\*scan\)|provider.decode|provider.encode|gateway.\(\*shapedConn\).Write|net/http.\(\*response\)|gateway.\(\*call\).answer|gateway.writeHead`},
	{"events and receipt as JSON", `encoding/json.Marshal|gateway.\(\*eventLog\)|identity.MarshalCanonical`},
	{"retry engine and receipt recorder", `internal/receipt\.|internal/retry\.`},
	{"access log", `gateway.\(\*Gateway\).logAccess|internal/logsink`},
	{"metrics", `prometheus|internal/metrics`},
	{"garbage collector (background)", `gcBgMarkWorker|bgsweep|bgscavenge`},
}

var accounting = regexp.MustCompile(`Showing nodes accounting for ([0-9.]+)(\w+), [0-9.]+% of ([0-9.]+)(\w+) total`)

// stageBudget prints, from a gateway's CPU profile of n requests, the CPU
// each stage of the request path took per request.
func stageBudget(profile string, n int, out io.Writer) error {
	sample := func(extra ...string) (part, total time.Duration, err error) {
		args := append([]string{"tool", "pprof", "-top", "-nodecount=1000000", "-nodefraction=0", "-edgefraction=0"}, extra...)
		b, err := exec.Command("go", append(args, profile)...).Output()
		if err != nil {
			return 0, 0, fmt.Errorf("go tool pprof %s: %w", profile, err)
		}
		m := accounting.FindStringSubmatch(string(b))
		if m == nil {
			return 0, 0, nil // the filter matched nothing
		}
		return dur(m[1], m[2]), dur(m[3], m[4]), nil
	}
	_, total, err := sample()
	if err != nil {
		return err
	}
	if total == 0 {
		return fmt.Errorf("%s holds no samples", profile)
	}
	per := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Nanoseconds())/1e3/float64(n)) }
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\tµs of CPU per request\tshare\t")
	var claimed []string
	var sum time.Duration
	for _, st := range stages {
		args := []string{"-focus=" + st.focus}
		if len(claimed) > 0 {
			args = append(args, "-ignore="+strings.Join(claimed, "|"))
		}
		part, _, err := sample(args...)
		if err != nil {
			return err
		}
		claimed = append(claimed, st.focus)
		sum += part
		fmt.Fprintf(tw, "%s\t%s\t%.0f %%\t\n", st.name, per(part), 100*float64(part)/float64(total))
	}
	fmt.Fprintf(tw, "other (scheduler, network poller, engine, flights)\t%s\t%.0f %%\t\n", per(total-sum), 100*float64(total-sum)/float64(total))
	fmt.Fprintf(tw, "total\t%s\t100 %%\t\n", per(total))
	return tw.Flush()
}

// dur reads one of pprof's amounts ("1.23s", "450ms").
func dur(v, unit string) time.Duration {
	f, _ := strconv.ParseFloat(v, 64)
	switch unit {
	case "ms":
		return time.Duration(f * float64(time.Millisecond))
	case "us", "µs":
		return time.Duration(f * float64(time.Microsecond))
	case "min":
		return time.Duration(f * float64(time.Minute))
	case "hrs":
		return time.Duration(f * float64(time.Hour))
	}
	return time.Duration(f * float64(time.Second))
}
