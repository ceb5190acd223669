package chaos

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// The soak's outcome: a row per invariant, with its count of cases and of
// violations, the first violations as examples, and the table they print as.

// Row is one invariant: how many cases were checked, how many broke it.
type Row struct {
	Invariant           string
	Checked, Violations int
	Note                string
}

// Report is a soak's outcome.
type Report struct {
	Requests, Kills int
	Replicas        int
	RedisRestarts   int
	Answered        int   // logical requests a client got a whole answer for
	Calls           int64 // upstream calls the mock received
	Receipts        int
	Rows            []Row
	// Examples are the first violations, to start from.
	Examples []string
}

// example keeps one of the first violations, to start from.
func (r *Report) example(format string, args ...any) {
	if len(r.Examples) < 10 {
		r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
	}
}

// Violations is the sum over the rows.
func (r *Report) Violations() int {
	n := 0
	for _, row := range r.Rows {
		n += row.Violations
	}
	return n
}

// Print writes the report as a table.
func (r *Report) Print(w io.Writer) {
	topology := "1 gateway on SQLite"
	if r.Replicas > 1 {
		topology = fmt.Sprintf("%d gateways on PostgreSQL and Redis, Redis restarted %d times", r.Replicas, r.RedisRestarts)
	}
	fmt.Fprintf(w, "%s: %d logical requests (%d answered), %d kills, %d upstream calls, %d receipts\n\n", topology, r.Requests, r.Answered, r.Kills, r.Calls, r.Receipts)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "invariant\tchecked\tviolations\tnote")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", row.Invariant, row.Checked, row.Violations, row.Note)
	}
	_ = tw.Flush()
	for _, e := range r.Examples {
		fmt.Fprintln(w, "  violation:", e)
	}
}
