package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

// Salvaging a corrupt intent log (docs/durability.md, "A damaged intent
// log"): what is readable is applied, the requests whose records may have
// been lost are marked indeterminate — their keys are refused, never
// generated again blind — and the damaged files are moved aside, never
// deleted.
//
// Which requests can be named. The damaged bytes cannot be read, but the
// LSNs the intact records around them lack say how many records were lost
// (LogReport.Missing). A request's records follow its claim, so
//   - a request in progress when the log broke — in the database, or
//     claimed by a record read before the last record lost — may have lost
//     its later records (its dispatch, its terminal): if no terminal of it
//     is read, it is marked indeterminate;
//   - a request whose appends or terminal are read but whose claim is
//     neither read nor in the database lost its claim: if its terminal is
//     read, that names its identity (and its receipt the body's digest),
//     and it is entered as indeterminate; if only events are read, its
//     identity is unknown and it is only listed (SalvageReport.Unkeyed);
//   - a request all of whose records were in the damaged bytes cannot be
//     named at all: a retry of its key is a new request.
// The plan — what to mark — is kept in the database before anything is
// applied, so that a salvage cut short by a crash and run again marks the
// same requests.

// metaSalvagePlan holds a salvage's plan until it is done; a done
// salvage's report is kept under metaSalvaged:<time>.
const (
	metaSalvagePlan = "intentlog_salvage_plan"
	metaSalvaged    = "intentlog_salvaged"
)

// LostRequest is a request SalvageLog marked indeterminate.
type LostRequest struct {
	RequestID, Identity, Tenant string
	// ClaimLost: its claim was in the damaged bytes (otherwise it was in
	// progress, and its later records may have been).
	ClaimLost bool
}

// SalvageReport is what SalvageLog found and did.
type SalvageReport struct {
	// LogReport is what the log held (as CheckLog reports it).
	LogReport
	// Moved maps each damaged file to where it was moved.
	Moved map[string]string
	// Applied counts the intact records applied to the database now;
	// Refused those of them it refused (the terminals and events of
	// requests whose claim was lost, kept as stale events).
	Applied, Refused int
	// Marked are the requests now indeterminate: their keys answer
	// 502 outcome_unknown.
	Marked []LostRequest
	// Unkeyed are requests whose claim was lost and whose identity no
	// record read names: their keys cannot be refused.
	Unkeyed []string
}

// salvagePlan is what a salvage marks, decided before it applies
// anything.
type salvagePlan struct {
	At         int64       `json:"at"`
	InProgress []string    `json:"in_progress"`
	LostClaims []lostClaim `json:"lost_claims"`
	Unkeyed    []string    `json:"unkeyed"`
}

// lostClaim is a request whose claim was lost and whose terminal was
// read: what its record can be made of.
type lostClaim struct {
	LSN           int64  `json:"lsn"`
	Identity      string `json:"identity"`
	RequestID     string `json:"request_id"`
	Tenant        string `json:"tenant"`
	Operation     string `json:"operation"`
	RequestSHA256 string `json:"request_sha256"`
	Stream        bool   `json:"stream"`
	CreatedAt     int64  `json:"created_at"`
	Generation    int64  `json:"generation"`
}

// ErrLogIntact: SalvageLog found no corruption in the log; the store's
// open applies it as it is.
var ErrLogIntact = errors.New("the intent log is intact: nothing to salvage")

// SalvageLog recovers what it can of a corrupt intent log beside the
// database at path (docs/durability.md): it applies every intact record
// past the database's position, marks the requests whose records may have
// been lost indeterminate, moves each file that holds corruption aside
// (FILE.damaged-TIME; never deleted) and deletes the others, now applied.
// The store then opens. It takes the database's lock (ErrLocked while a
// gateway runs); on an intact log it changes nothing and returns
// ErrLogIntact with the report.
func SalvageLog(path string, o Options) (*SalvageReport, error) {
	ctx := context.Background()
	o.behind = true
	db, err := openLocked(path, o)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	wrap := func(err error) error { return fmt.Errorf("salvage the intent log of %s: %w", path, err) }
	applied, err := db.appliedLSN(ctx)
	if err != nil {
		return nil, wrap(err)
	}
	ls, err := scanLog(path, applied)
	if err != nil {
		return nil, wrap(err)
	}
	rep := &SalvageReport{LogReport: *ls.report(), Moved: map[string]string{}}
	if ls.err() == nil {
		return rep, ErrLogIntact
	}
	plan, err := db.salvagePlan(ctx, ls)
	if err != nil {
		return nil, wrap(err)
	}
	for _, lr := range ls.recs {
		if lr.lsn > applied {
			rep.Applied++
		}
	}
	if _, rep.Refused, err = db.replayLog(ctx, ls.recs, applied); err != nil {
		return nil, wrap(fmt.Errorf("apply the intact records: %w", err))
	}
	if rep.Marked, err = db.markLost(ctx, plan, rep); err != nil {
		return nil, wrap(err)
	}
	rep.Unkeyed = plan.Unkeyed
	if err := moveAside(ls, rep, time.Unix(0, plan.At).UTC()); err != nil {
		return nil, wrap(err)
	}
	return rep, nil
}

// salvagePlan decides what to mark, and keeps it with the finishes whose
// claim was lost (set aside, as records refused are) — or reads the plan
// a salvage cut short kept.
func (s *Store) salvagePlan(ctx context.Context, ls *logScan) (*salvagePlan, error) {
	var kept []byte
	err := s.r.QueryRowContext(ctx, `SELECT v FROM meta WHERE k = ?`, metaSalvagePlan).Scan(&kept)
	if err == nil {
		p := &salvagePlan{}
		if err := json.Unmarshal(kept, p); err != nil {
			return nil, fmt.Errorf("read the plan of a salvage cut short: %w", err)
		}
		return p, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	p := &salvagePlan{At: time.Now().UnixNano()}
	ranges, _ := ls.missing()
	var aside []*logRecord
	if len(ranges) > 0 {
		if aside, err = s.planLost(ctx, ls, ranges, p); err != nil {
			return nil, err
		}
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	err = s.writeSync(ctx, true, syncFull, func(tx wtx) error {
		const q = `INSERT INTO meta (k, v) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v`
		for _, lr := range aside {
			key := fmt.Sprintf("%s:%020d", metaRefused, lr.lsn)
			if _, err := tx.Exec(q, key, lr.raw); err != nil {
				return err
			}
			why := fmt.Sprintf("salvage: the claim of request %s was in the damaged part of the intent log", lr.fin.RequestID)
			if _, err := tx.Exec(q, metaRefused+"_why:"+key[len(metaRefused)+1:], why); err != nil {
				return err
			}
		}
		_, err := tx.Exec(q, metaSalvagePlan, b)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("keep the salvage's plan: %w", err)
	}
	return p, nil
}

// planLost fills p with the requests whose records the missing LSNs may
// have held, and returns the terminals read of those whose claim was lost.
func (s *Store) planLost(ctx context.Context, ls *logScan, ranges []lsnRange, p *salvagePlan) ([]*logRecord, error) {
	lastLost := ranges[len(ranges)-1].to
	claimed := map[string]bool{} // claims read past the database's position
	finished := map[string]*logRecord{}
	var named []string // request ids of events and terminals read, in order
	for _, lr := range ls.recs {
		if lr.lsn <= ls.applied || lr.bad != nil {
			continue
		}
		switch lr.kind {
		case kindClaim, kindReplace:
			claimed[lr.rec.RequestID] = true
			if lr.lsn < lastLost {
				p.InProgress = append(p.InProgress, lr.rec.RequestID)
			}
		case kindAppend:
			named = append(named, lr.events[0].RequestID)
		case kindFinish:
			named = append(named, lr.fin.RequestID)
			finished[lr.fin.RequestID] = lr
		}
	}
	rows, err := s.r.QueryContext(ctx, `SELECT request_id FROM requests WHERE finished_at = 0 AND state = 'in_progress'`)
	if err != nil {
		return nil, fmt.Errorf("list the requests in progress: %w", err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		p.InProgress = append(p.InProgress, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var aside []*logRecord
	seen := map[string]bool{}
	for _, id := range named {
		if claimed[id] || seen[id] {
			continue
		}
		seen[id] = true
		var one int
		switch err := s.r.QueryRowContext(ctx, `SELECT 1 FROM requests WHERE request_id = ?`, id).Scan(&one); {
		case err == nil:
			continue // the database has its record: in progress (above), or finished
		case !errors.Is(err, sql.ErrNoRows):
			return nil, err
		}
		f := finished[id]
		switch {
		case f == nil:
			p.Unkeyed = append(p.Unkeyed, id)
		case f.fin.Release:
			// Its key was given back: there is nothing to refuse.
		default:
			p.LostClaims = append(p.LostClaims, claimOf(f))
			aside = append(aside, f)
		}
	}
	slices.Sort(p.InProgress)
	p.InProgress = slices.Compact(p.InProgress)
	return aside, nil
}

// claimOf is what a request's record can be made of from its terminal:
// the identity and tenant it names, and the request body's digest, the
// operation, stream and creation time its receipt names (a receipt that
// does not name them leaves them empty).
func claimOf(f *logRecord) lostClaim {
	c := lostClaim{LSN: f.lsn, Identity: f.fin.Identity, RequestID: f.fin.RequestID, Tenant: f.fin.Tenant, Generation: f.fin.Generation}
	var r struct {
		Operation     string    `json:"operation"`
		RequestSHA256 string    `json:"request_sha256"`
		Stream        bool      `json:"stream"`
		CreatedAt     time.Time `json:"created_at"`
	}
	if json.Unmarshal(f.fin.Receipt, &r) == nil {
		c.Operation, c.RequestSHA256, c.Stream, c.CreatedAt = r.Operation, r.RequestSHA256, r.Stream, ns(r.CreatedAt)
	}
	if c.CreatedAt <= 0 {
		c.CreatedAt = ns(f.fin.At)
	}
	return c
}

// markLost marks the plan's requests indeterminate — those still in
// progress, and those whose claim was lost — and keeps the salvage's
// report in place of its plan, in one commit on the disk.
func (s *Store) markLost(ctx context.Context, p *salvagePlan, rep *SalvageReport) ([]LostRequest, error) {
	var marked []LostRequest
	summary, err := json.Marshal(map[string]any{"files": rep.Files, "problems": errorStrings(rep.Problems), "missing": rep.Missing,
		"missing_records": rep.MissingRecords, "damaged_bytes": rep.DamagedBytes, "plan": p})
	if err != nil {
		return nil, err
	}
	err = s.writeSync(ctx, true, syncFull, func(tx wtx) error {
		marked = marked[:0]
		for _, id := range p.InProgress {
			var l LostRequest
			err := tx.QueryRow(`UPDATE requests SET state = ?, finished_at = ?, lease_until = 0, response = NULL
				WHERE request_id = ? AND state = 'in_progress' AND finished_at = 0 RETURNING request_id, identity, tenant`,
				string(ledger.Indeterminate), p.At, id).Scan(&l.RequestID, &l.Identity, &l.Tenant)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				continue // its terminal was read and applied
			case err != nil:
				return fmt.Errorf("mark %s indeterminate: %w", id, err)
			}
			marked = append(marked, l)
		}
		for _, c := range p.LostClaims {
			stream := 0
			if c.Stream {
				stream = 1
			}
			res, err := tx.Exec(`INSERT INTO requests (`+recordCols+`) VALUES (?,?,?,?,?,?,?,'',?,0,?,?,NULL) ON CONFLICT DO NOTHING`,
				c.Identity, c.RequestID, c.Tenant, c.Operation, c.RequestSHA256, stream, string(ledger.Indeterminate), c.Generation, c.CreatedAt, p.At)
			if err != nil {
				return fmt.Errorf("enter %s as indeterminate: %w", c.RequestID, err)
			}
			if n, _ := res.RowsAffected(); n == 1 {
				marked = append(marked, LostRequest{RequestID: c.RequestID, Identity: c.Identity, Tenant: c.Tenant, ClaimLost: true})
			}
		}
		const q = `INSERT INTO meta (k, v) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v`
		if _, err := tx.Exec(q, metaSalvaged+":"+time.Unix(0, p.At).UTC().Format(time.RFC3339Nano), summary); err != nil {
			return err
		}
		_, err := tx.Exec(`DELETE FROM meta WHERE k = ?`, metaSalvagePlan)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("mark the lost requests: %w", err)
	}
	return marked, nil
}

func errorStrings[E error](errs []E) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = e.Error()
	}
	return out
}

// moveAside moves each file holding corruption to FILE.damaged-TIME and
// deletes the log's other files — every record they hold is applied and
// on the disk (markLost committed at FULL).
func moveAside(ls *logScan, rep *SalvageReport, at time.Time) error {
	damaged := map[string]bool{}
	for _, p := range ls.problems {
		damaged[p.Path] = true
	}
	suffix := ".damaged-" + at.Format("20060102T150405Z")
	for _, f := range ls.files {
		if !damaged[f.path] {
			continue
		}
		to := f.path + suffix
		if err := os.Rename(f.path, to); err != nil {
			return fmt.Errorf("move the damaged file aside: %w", err)
		}
		rep.Moved[f.path] = to
	}
	if len(ls.files) > 0 {
		if err := syncDir(filepath.Dir(ls.files[0].path)); err != nil {
			return err
		}
	}
	for _, f := range ls.files {
		if damaged[f.path] {
			continue
		}
		if err := os.Remove(f.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove an applied log file: %w", err)
		}
	}
	return nil
}

// syncDir makes dir's entries durable (a file renamed in it).
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
