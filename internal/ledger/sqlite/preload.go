package sqlite

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/oncegate/oncegate/internal/ledger"
)

// Preload fills the ledger at path with n finished requests copied from
// the ones a gateway left in it — what `bench -steady N` measures a
// gateway on (docs/performance.md, "At steady state"). The gateway must
// have stopped (Preload takes the database's lock, and applies a log left
// beside it first).
//
// Every finished request in the database is a template; the copies take
// them in turn. A copy is its template's rows — the record with its
// stored response, its rows of events, its receipt — with a request id,
// identity, fingerprint and request hash of its own and every time moved:
// the copies are spread evenly over the span before the oldest template,
// oldest first, as a gateway would have written them. The ledger's
// bytes stay the gateway's own: the columns Preload does not know are
// copied as they are (text and blobs with the template's ids and times
// in them replaced; whole numbers within a day of the template's start,
// times in Unix nanoseconds, moved), so what a later schema adds to a
// request's rows is copied too. Each copy's charge — what the templates'
// spend comes to per receipt — is added to its tenant's spend on its UTC
// day, as a finish adds it (and to each virtual key's, by the same rule,
// if the templates charged keys).
//
// It writes without a journal, in large transactions: a failure leaves
// the database unusable, which a benchmark's fixture can afford.
func Preload(ctx context.Context, path string, n int, span time.Duration) error {
	if n <= 0 {
		return nil
	}
	st, err := OpenWith(path, Options{SyncNormal: true}) // applies a log left beside it
	if err != nil {
		return fmt.Errorf("preload %s: %w", path, err)
	}
	if err := st.Close(); err != nil {
		return fmt.Errorf("preload %s: %w", path, err)
	}
	lock, err := lockFile(path + ".lock")
	if err != nil {
		return fmt.Errorf("preload %s: %w", path, err)
	}
	defer lock.release()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return fmt.Errorf("preload %s: %w", path, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	c, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("preload %s: %w", path, err)
	}
	defer c.Close()
	p := &preloader{c: c}
	if err := p.load(ctx); err != nil {
		return fmt.Errorf("preload %s: read the templates: %w", path, err)
	}
	for _, q := range []string{`PRAGMA journal_mode=DELETE`, `PRAGMA journal_mode=OFF`, `PRAGMA synchronous=OFF`, `PRAGMA cache_size=-262144`} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("preload %s: %s: %w", path, q, err)
		}
	}
	if err := p.write(ctx, n, span); err != nil {
		return fmt.Errorf("preload %s: %w", path, err)
	}
	for _, q := range []string{`PRAGMA synchronous=FULL`, `PRAGMA journal_mode=WAL`} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("preload %s: %s: %w", path, q, err)
		}
	}
	return nil
}

// preloader copies template requests.
type preloader struct {
	c         *sql.Conn
	templates []*template
	reqCols   []string
	evCols    []string
	// charges is what one copy of a template of each tenant (or key)
	// adds to its spend.
	charges, keyCharges map[string]int64
}

// template is a finished request the gateway wrote: its rows, and the
// strings in them a copy replaces.
type template struct {
	start                                 int64   // its created_at (Unix ns)
	record                                []any   // its requests row
	events                                [][]any // its events rows (the receipt among them)
	tenant                                string
	requestID, identity, fingerprint, sha string
	patterns                              map[string]*pattern       // by the bytes cut
	unpacked                              map[string][]ledger.Event // packed rows, by their bytes
}

// isoTime is a time as the gateway's JSON writes it.
var isoTime = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)

func (p *preloader) load(ctx context.Context) error {
	var err error
	if p.reqCols, err = p.columns(ctx, "requests"); err != nil {
		return err
	}
	if p.evCols, err = p.columns(ctx, "events"); err != nil {
		return err
	}
	rows, err := p.c.QueryContext(ctx, `SELECT `+strings.Join(p.reqCols, ", ")+` FROM requests WHERE state != 'in_progress' ORDER BY created_at`)
	if err != nil {
		return err
	}
	for rows.Next() {
		vals := make([]any, len(p.reqCols))
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			rows.Close()
			return err
		}
		t := &template{record: vals}
		for i, col := range p.reqCols {
			switch col {
			case "request_id":
				t.requestID = asString(vals[i])
			case "identity":
				t.identity = asString(vals[i])
			case "request_sha256":
				t.sha = asString(vals[i])
			case "tenant":
				t.tenant = asString(vals[i])
			case "created_at":
				t.start, _ = vals[i].(int64)
			}
		}
		_, t.fingerprint, _ = strings.Cut(t.identity, ":")
		p.templates = append(p.templates, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(p.templates) == 0 {
		return errors.New("the ledger holds no finished request to copy")
	}
	for _, t := range p.templates {
		rows, err := p.c.QueryContext(ctx, `SELECT `+strings.Join(p.evCols, ", ")+` FROM events WHERE request_id = ? ORDER BY id`, t.requestID)
		if err != nil {
			return err
		}
		for rows.Next() {
			vals := make([]any, len(p.evCols))
			ptrs := make([]any, len(vals))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				rows.Close()
				return err
			}
			t.events = append(t.events, vals)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	// What a request was charged: the spend over the receipts, by tenant
	// (the gateway sums a day's charges in one row; a request replaced
	// since was charged too).
	p.charges, p.keyCharges = map[string]int64{}, map[string]int64{}
	count := map[string]int64{}
	if err := p.sumSpend(ctx, `SELECT tenant, COUNT(*) FROM events WHERE seq = 0 GROUP BY tenant`, func(who string, v int64) { count[who] = v }); err != nil {
		return err
	}
	receipts := int64(0)
	for _, v := range count {
		receipts += v
	}
	if err := p.sumSpend(ctx, `SELECT tenant, SUM(charged) FROM tenant_spend GROUP BY tenant`, func(who string, v int64) {
		if count[who] > 0 {
			p.charges[who] = v / count[who]
		}
	}); err != nil {
		return err
	}
	return p.sumSpend(ctx, `SELECT key_id, SUM(charged) FROM key_spend GROUP BY key_id`, func(who string, v int64) {
		if receipts > 0 {
			p.keyCharges[who] = v / receipts
		}
	})
}

func (p *preloader) sumSpend(ctx context.Context, q string, fn func(string, int64)) error {
	rows, err := p.c.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var who string
		var v int64
		if err := rows.Scan(&who, &v); err != nil {
			return err
		}
		fn(who, v)
	}
	return rows.Err()
}

func (p *preloader) columns(ctx context.Context, table string) ([]string, error) {
	rows, err := p.c.QueryContext(ctx, `SELECT name FROM pragma_table_info(?) ORDER BY cid`, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		if name != "id" { // the events table's rowid: a copy gets its own
			cols = append(cols, name)
		}
	}
	return cols, rows.Err()
}

// preloadBatch is how many copies one transaction writes.
const preloadBatch = 20000

// write adds n copies, oldest first, in transactions of preloadBatch.
func (p *preloader) write(ctx context.Context, n int, span time.Duration) error {
	insReq, err := p.c.PrepareContext(ctx, `INSERT INTO requests (`+strings.Join(p.reqCols, ", ")+`) VALUES (`+placeholders(len(p.reqCols), 1)+`)`)
	if err != nil {
		return err
	}
	defer insReq.Close()
	insEv, err := p.c.PrepareContext(ctx, `INSERT INTO events (`+strings.Join(p.evCols, ", ")+`) VALUES (`+placeholders(len(p.evCols), 1)+`)`)
	if err != nil {
		return err
	}
	defer insEv.Close()
	insFacts, err := p.c.PrepareContext(ctx, factsInsert(1))
	if err != nil {
		return err
	}
	defer insFacts.Close()
	typeAt, dataAt, idAt := slices.Index(p.evCols, "type"), slices.Index(p.evCols, "data"), slices.Index(p.evCols, "request_id")
	first := p.templates[0].start
	step := int64(span) / int64(n)
	spend := map[spendKey]int64{}
	var salt [8]byte
	if _, err := rand.Read(salt[:]); err != nil {
		return err
	}
	for done := 0; done < n; {
		if _, err := p.c.ExecContext(ctx, `BEGIN`); err != nil {
			return err
		}
		end := min(n, done+preloadBatch)
		for k := done; k < end; k++ {
			t := p.templates[k%len(p.templates)]
			at := first - int64(span) + int64(k)*step
			cp := t.copyAt(k, salt[:], at-t.start)
			if _, err := insReq.ExecContext(ctx, cp.subst(t.record, p.reqCols)...); err != nil {
				_, _ = p.c.ExecContext(ctx, `ROLLBACK`)
				return fmt.Errorf("copy %d of %s: %w", k, t.requestID, err)
			}
			for _, ev := range t.events {
				row := cp.subst(ev, p.evCols)
				if _, err := insEv.ExecContext(ctx, row...); err != nil {
					_, _ = p.c.ExecContext(ctx, `ROLLBACK`)
					return fmt.Errorf("copy %d of %s's events: %w", k, t.requestID, err)
				}
				// A receipt has its spend facts beside it, as a finish
				// writes them (factArgs).
				if typeAt < 0 || dataAt < 0 || idAt < 0 || fmt.Sprint(row[typeAt]) != receiptType {
					continue
				}
				body, _ := row[dataAt].([]byte)
				if fa := factArgs(t.tenant, fmt.Sprint(row[idAt]), body); fa != nil {
					if _, err := insFacts.ExecContext(ctx, fa...); err != nil {
						_, _ = p.c.ExecContext(ctx, `ROLLBACK`)
						return fmt.Errorf("copy %d of %s's spend facts: %w", k, t.requestID, err)
					}
				}
			}
			day := ledger.Day(fromNS(at))
			spend[spendKey{day: day, tenant: t.tenant}] += p.charges[t.tenant]
			for key, v := range p.keyCharges {
				spend[spendKey{day: day, tenant: key, key: true}] += v
			}
		}
		if _, err := p.c.ExecContext(ctx, `COMMIT`); err != nil {
			return err
		}
		done = end
	}
	for k, v := range spend {
		if v == 0 {
			continue
		}
		q := qCharge
		if k.key {
			q = qKeyCharge
		}
		if _, err := p.c.ExecContext(ctx, q, k.day, k.tenant, v); err != nil {
			return fmt.Errorf("spend: %w", err)
		}
	}
	return nil
}

// copyOf is one copy's replacements.
type copyOf struct {
	t                           *template
	shift                       int64 // ns
	requestID, fingerprint, sha string
}

// copyAt is copy k of t, its times moved by shift.
func (t *template) copyAt(k int, salt []byte, shift int64) *copyOf {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(k))
	fp := sha256.Sum256(append(append([]byte(t.identity), salt...), b[:]...))
	body := sha256.Sum256(append(append([]byte(t.sha), salt...), b[:]...))
	// A version 7 UUID of the copy's time, as the gateway's request ids.
	var id uuid.UUID
	copy(id[:], body[16:])
	ms := uint64(fromNS(t.start + shift).UnixMilli())
	id[0], id[1], id[2], id[3], id[4], id[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	id[6] = id[6]&0x0f | 0x70
	id[8] = id[8]&0x3f | 0x80
	return &copyOf{t: t, shift: shift, requestID: id.String(), fingerprint: hex.EncodeToString(fp[:]), sha: hex.EncodeToString(body[:])}
}

// subst is a template row with the copy's ids and times.
func (c *copyOf) subst(row []any, cols []string) []any {
	out := make([]any, len(row))
	for i, v := range row {
		switch x := v.(type) {
		case int64:
			if x != 0 && (x-c.t.start < int64(24*time.Hour) && c.t.start-x < int64(24*time.Hour)) {
				x += c.shift
			}
			out[i] = x
		case string:
			out[i] = string(c.text([]byte(x)))
		case []byte:
			if cols[i] == "data" && len(x) > 0 && x[0] == packedV1 {
				out[i] = c.packed(x)
			} else {
				out[i] = c.text(x)
			}
		default:
			out[i] = v
		}
	}
	return out
}

// text replaces the template's ids and JSON times in b.
func (c *copyOf) text(b []byte) []byte {
	pat := c.t.pattern(b)
	if len(pat.slots) == 0 {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for i, part := range pat.parts {
		out = append(out, part...)
		if i == len(pat.slots) {
			break
		}
		switch sl := pat.slots[i]; sl.kind {
		case slotRequestID:
			out = append(out, c.requestID...)
		case slotFingerprint:
			out = append(out, c.fingerprint...)
		case slotSHA:
			out = append(out, c.sha...)
		default:
			out = sl.at.Add(time.Duration(c.shift)).UTC().AppendFormat(out, time.RFC3339Nano)
		}
	}
	return out
}

// pattern is a template's bytes cut at what a copy replaces: parts[i],
// then slots[i]'s value, and so on, parts having one more.
type pattern struct {
	parts [][]byte
	slots []slot
}

type slot struct {
	kind int
	at   time.Time // slotTime: the template's time
}

const (
	slotRequestID = iota
	slotFingerprint
	slotSHA
	slotTime
)

// pattern cuts b (once for each distinct value: the copies reuse it).
func (t *template) pattern(b []byte) *pattern {
	if p, ok := t.patterns[string(b)]; ok {
		return p
	}
	type hit struct {
		at, end int
		s       slot
	}
	var hits []hit
	for kind, s := range []string{slotRequestID: t.requestID, slotFingerprint: t.fingerprint, slotSHA: t.sha} {
		if s == "" {
			continue
		}
		for off := 0; ; {
			i := bytes.Index(b[off:], []byte(s))
			if i < 0 {
				break
			}
			hits = append(hits, hit{off + i, off + i + len(s), slot{kind: kind}})
			off += i + len(s)
		}
	}
	for _, m := range isoTime.FindAllIndex(b, -1) {
		if at, err := time.Parse(time.RFC3339Nano, string(b[m[0]:m[1]])); err == nil {
			hits = append(hits, hit{m[0], m[1], slot{kind: slotTime, at: at}})
		}
	}
	slices.SortFunc(hits, func(x, y hit) int { return x.at - y.at })
	p := &pattern{}
	prev := 0
	for _, h := range hits {
		if h.at < prev {
			continue // overlaps the one before
		}
		p.parts = append(p.parts, b[prev:h.at])
		p.slots = append(p.slots, h.s)
		prev = h.end
	}
	p.parts = append(p.parts, b[prev:])
	if t.patterns == nil {
		t.patterns = map[string]*pattern{}
	}
	t.patterns[string(b)] = p
	return p
}

// packed is a packed events row of the template's, its events' times
// and data those of the copy.
func (c *copyOf) packed(b []byte) []byte {
	tevs, ok := c.t.unpacked[string(b)]
	if !ok {
		var err error
		if tevs, err = unpackEvents(c.t.requestID, b); err != nil {
			return c.text(b)
		}
		if c.t.unpacked == nil {
			c.t.unpacked = map[string][]ledger.Event{}
		}
		c.t.unpacked[string(b)] = tevs
	}
	evs := slices.Clone(tevs)
	for i := range evs {
		evs[i].RequestID = c.requestID
		if ns(evs[i].At) != 0 {
			evs[i].At = fromNS(ns(evs[i].At) + c.shift)
		}
		if evs[i].Data != nil {
			evs[i].Data = c.text(evs[i].Data)
		}
	}
	return packEvents(evs)
}

func asString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	return ""
}

// receiptType is the events row type a receipt is stored under (with seq
// 0; events.go).
const receiptType = "receipt"
