package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/oncegate/oncegate/internal/ledger/postgres"
	"github.com/oncegate/oncegate/internal/ledger/sqlite"
	"github.com/oncegate/oncegate/internal/policy"
)

// ledgerUsage is what `oncegate ledger -h` prints.
const ledgerUsage = `usage: oncegate ledger check --config FILE [--store URL]
       oncegate ledger salvage --accept-loss --config FILE [--store URL]

A SQLite ledger's intent log (PATH.log.N beside the database) holds the
gateway's newest writes until the database has applied them. A crash can
leave only a torn last record, which the gateway cuts when it starts; any
other damage is corruption, and serve refuses to start on it, keeping
every file (docs/durability.md, "A damaged intent log").

  check    say what serve would find, without starting: the files, the
           records, the database's position, and any corruption with its
           file and byte offset. Exit 0 if the log is intact, 1 if not.
  salvage  recover a corrupt log (the gateway stopped): apply every intact
           record, mark indeterminate the requests whose records may have
           been lost — a retry of their keys answers 502 outcome_unknown,
           never a second generation — print their request ids, and move
           the damaged files aside (FILE.damaged-TIME; never deleted).
           --accept-loss is required: the damaged records are lost.
`

// ledgerCmd checks or salvages a SQLite ledger's intent log.
func ledgerCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, ledgerUsage)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stderr, ledgerUsage)
		return 0
	case "check":
		return ledgerCheck(ctx, args[1:], stdout, stderr)
	case "salvage":
		return ledgerSalvage(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "oncegate ledger: unknown command %q\n\n%s", args[0], ledgerUsage)
	return 2
}

// ledgerPath parses a ledger command's flags and returns the SQLite
// database its configuration names ("" with code 0: the store has no
// intent log, said on stdout).
func ledgerPath(verb, usage, what string, args []string, stdout, stderr io.Writer, acceptLoss *bool) (string, int) {
	fs := newFlags("ledger "+verb, usage, what, "", stderr)
	path := fs.String("config", "", "configuration naming the store (required)")
	storeFlag := fs.String("store", "", "ledger whose intent log to read (default: the config's store)")
	if acceptLoss != nil {
		fs.BoolVar(acceptLoss, "accept-loss", false, "accept that the records in the damaged bytes are lost (required)")
	}
	if err := fs.Parse(args); err != nil {
		return "", parseFailed(err)
	}
	if *path == "" || fs.NArg() > 0 {
		fs.Usage()
		return "", 2
	}
	pol, err := policy.Load(*path)
	if err != nil {
		return "", reportConfigError(stderr, *path, err)
	}
	store := pol.Config.Store
	if *storeFlag != "" {
		store = *storeFlag
	}
	if !strings.HasPrefix(store, "sqlite://") || store == "sqlite://" {
		fmt.Fprintf(stdout, "store %s keeps no intent log of the gateway's own (a sqlite:// ledger does): nothing to %s\n", redactStore(store), verb)
		return "", 0
	}
	return strings.TrimPrefix(store, "sqlite://"), 0
}

// ledgerCheck reports what a SQLite ledger's intent log holds; exit 1 if
// it is corrupt.
func ledgerCheck(_ context.Context, args []string, stdout, stderr io.Writer) int {
	path, code := ledgerPath("check", "--config FILE [--store URL]", "Check a SQLite ledger's intent log as serve would at start, without starting and without\n"+
		"changing anything (the gateway must be stopped). Exit 0 if it is intact, 1 if it is corrupt.", args, stdout, stderr, nil)
	if path == "" {
		return code
	}
	rep, err := sqlite.CheckLog(path)
	if err != nil {
		fmt.Fprintf(stderr, "oncegate ledger check: %v\n", err)
		return 1
	}
	if rep.Err() == nil {
		printIntact(stdout, path, rep)
		return 0
	}
	fmt.Fprintf(stdout, "ledger %s: the intent log is CORRUPT: serve will not start on it\n", path)
	printDamage(stdout, rep)
	fmt.Fprintf(stdout, "every file is kept as it is; `oncegate ledger salvage --accept-loss` applies the intact records, marks the requests\n"+
		"whose records may have been lost indeterminate (their keys are refused) and moves the damaged files aside\n")
	return 1
}

// printIntact summarises an intact log.
func printIntact(w io.Writer, path string, rep *sqlite.LogReport) {
	if len(rep.Files) == 0 {
		fmt.Fprintf(w, "ledger %s: no intent log: the database holds every record\n", path)
		return
	}
	fmt.Fprintf(w, "ledger %s: intent log intact: %d file(s), %d record(s)", path, len(rep.Files), rep.Records)
	if rep.Records > 0 {
		fmt.Fprintf(w, " (LSN %d to %d)", rep.First, rep.Last)
	}
	fmt.Fprintf(w, ", %d not yet in the database (it has applied up to LSN %d)\n", rep.Unapplied, rep.Applied)
	if rep.TornFile != "" {
		fmt.Fprintf(w, "  a torn last record: %d byte(s) at %s byte %d, which the next start cuts\n", rep.TornBytes, rep.TornFile, rep.TornOffset)
	}
}

// printDamage lists a corrupt log's problems and what they lost.
func printDamage(w io.Writer, rep *sqlite.LogReport) {
	for _, p := range rep.Problems {
		fmt.Fprintf(w, "  %v\n", p)
	}
	if rep.MissingRecords == 0 {
		fmt.Fprintf(w, "  lost: no record the database lacks (it has applied up to LSN %d); %d damaged byte(s)\n", rep.Applied, rep.DamagedBytes)
		return
	}
	var ranges []string
	for _, m := range rep.Missing {
		if m.From == m.To {
			ranges = append(ranges, fmt.Sprint(m.From))
		} else {
			ranges = append(ranges, fmt.Sprintf("%d-%d", m.From, m.To))
		}
	}
	fmt.Fprintf(w, "  lost: %d record(s) the database lacks (LSN %s), %d damaged byte(s); %d intact record(s) past its position (LSN %d)\n",
		rep.MissingRecords, strings.Join(ranges, ", "), rep.DamagedBytes, rep.Unapplied, rep.Applied)
}

// ledgerSalvage recovers a corrupt intent log.
func ledgerSalvage(_ context.Context, args []string, stdout, stderr io.Writer) int {
	var accept bool
	path, code := ledgerPath("salvage", "--accept-loss --config FILE [--store URL]", "Recover a corrupt intent log (the gateway must be stopped): apply every intact record, mark the\n"+
		"requests whose records may have been lost indeterminate — a retry of their keys answers 502 outcome_unknown —\n"+
		"print their request ids, and move the damaged files aside (never deleted).", args, stdout, stderr, &accept)
	if path == "" {
		return code
	}
	if !accept {
		fmt.Fprintln(stderr, "oncegate ledger salvage: the records in the damaged bytes are lost: pass --accept-loss to salvage the rest\n"+
			"(oncegate ledger check says what is damaged)")
		return 2
	}
	rep, err := sqlite.SalvageLog(path, sqlite.Options{})
	switch {
	case errors.Is(err, sqlite.ErrLogIntact):
		printIntact(stdout, path, &rep.LogReport)
		fmt.Fprintln(stdout, "nothing to salvage: serve applies the log as it is")
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "oncegate ledger salvage: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "ledger %s: intent log salvaged\n", path)
	printDamage(stdout, &rep.LogReport)
	for from, to := range rep.Moved {
		fmt.Fprintf(stdout, "  moved %s aside to %s\n", from, to)
	}
	fmt.Fprintf(stdout, "  applied %d intact record(s)", rep.Applied)
	if rep.Refused > 0 {
		fmt.Fprintf(stdout, "; the database refused %d, kept as stale events: the events and terminals of requests whose claim was lost", rep.Refused)
	}
	fmt.Fprintln(stdout)
	fmt.Fprintf(stdout, "request ids whose records were lost, now indeterminate (a retry of their keys answers 502 outcome_unknown): %d\n", len(rep.Marked))
	for _, m := range rep.Marked {
		why := "in progress when the log broke: its later records may have been lost"
		if m.ClaimLost {
			why = "its claim was lost"
		}
		fmt.Fprintf(stdout, "  %s\ttenant %s\t%s\n", m.RequestID, m.Tenant, why)
	}
	if len(rep.Unkeyed) > 0 {
		fmt.Fprintf(stdout, "request ids whose claim was lost and whose key no intact record names (not refused): %d\n", len(rep.Unkeyed))
		for _, id := range rep.Unkeyed {
			fmt.Fprintf(stdout, "  %s\n", id)
		}
	}
	if rep.MissingRecords > 0 {
		fmt.Fprintln(stdout, "a request whose every record was in the damaged bytes, if there was one, cannot be named: a retry of its key is a new request")
	}
	return 0
}

// redactStore hides a store URL's password.
func redactStore(store string) string {
	if policy.IsPostgres(store) {
		return postgres.Redact(store)
	}
	return store
}
