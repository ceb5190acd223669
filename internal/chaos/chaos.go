// Package chaos is the soak with an invariant checker (docs/chaos.md):
// logical requests from the official SDKs at their default retries and
// from raw clients that re-POST, streaming and not, OpenAI and Anthropic,
// through a gateway that is SIGKILLed and restarted while they run, in
// front of a mock provider that fails a fifth of its calls in every way
// it can. At the end it reads the mock's own counts, the ledger and every
// receipt, and reports each invariant with its count of violations.
package chaos

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/postgres"
	"github.com/oncegate/oncegate/internal/ledger/sqlite"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/receipt"
)

// Config is one soak.
type Config struct {
	// Binary is the oncegate binary to run; Dir holds the run's files.
	Binary, Dir string
	// Requests logical requests from Workers clients at once; a gateway
	// is SIGKILLed Kills times, spread over the run.
	Requests, Workers, Kills int
	Seed                     uint64
	// Replicas is 1 (one gateway on SQLite) or more: gateways on the
	// PostgreSQL database Postgres names (in a schema of the soak's own)
	// coordinating through a Redis of the soak's own, which the driver
	// restarts at every third kill.
	Replicas int
	Postgres string
	// Progress, when set, gets a line per kill.
	Progress io.Writer
}

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

// The soak's tenants: one plain, one that may use private routes only,
// one with a daily cost ceiling the run exhausts.
const (
	apiKey     = "sk-chaos-tenant"
	privateKey = "sk-chaos-private"
	cappedKey  = "sk-chaos-capped"
	tokens     = 24
)

// configTemplate is the gateway under test: two routes on two protocols
// (so resume and fallback translate) and a private one, three attempts,
// short timeouts so that hangs end, and a short lease so that recovery is
// quick; chat-metered caps each request's cost, chat-spread spreads its
// requests over a weighted tier, chat-clouds over Azure OpenAI, Bedrock
// and Vertex AI (Claude) then Gemini, and chat-stateful keeps
// its conversations at the provider.
const configTemplate = `
listen: 127.0.0.1:0
store: STORE
coordination: COORD
tenants:
  - {id: chaos, api_key_env: CHAOS_KEY}
  - {id: chaos-private, api_key_env: CHAOS_PRIVATE_KEY, max_data_boundary: private}
  - {id: chaos-capped, api_key_env: CHAOS_CAPPED_KEY, budget: {cost_usd_per_day: DAY_CEILING}}
providers:
  - {id: oa, type: openai, base_url: "MOCK/v1", timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
  - {id: an, type: anthropic, base_url: "MOCK", timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
  - {id: rs, type: openai-responses, base_url: "MOCK/v1", timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
  - {id: az, type: azure-openai, base_url: "MOCK", api_version: "2024-10-21", api_key_env: CHAOS_AZURE_KEY, timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
  - {id: br, type: bedrock, region: us-east-1, base_url: "MOCK", timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
  - {id: gm, type: gemini, base_url: "MOCK", api_key_env: CHAOS_GEMINI_KEY, timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
  - {id: vx, type: vertex, base_url: "MOCK", project: chaos, location: us-east5, publisher: anthropic, credentials_file_env: CHAOS_VERTEX_SA, timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
routes:
  - {id: primary, provider: oa, model: m-primary, behavior_class: c, data_boundary: external, max_attempts: 2,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 4096}, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}}
  - {id: fallback, provider: an, model: m-fallback, behavior_class: c, data_boundary: external, max_attempts: 2, weight: 2,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 4096}, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}}
  - {id: inhouse, provider: oa, model: m-inhouse, behavior_class: c, data_boundary: private, max_attempts: 2,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 4096}, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}}
  - {id: rs-a, provider: rs, model: m-rs-a, behavior_class: s, data_boundary: external, max_attempts: 2,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 4096}, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}}
  - {id: rs-b, provider: rs, model: m-rs-b, behavior_class: s, data_boundary: external, max_attempts: 2,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 4096}, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}}
  - {id: azure, provider: az, model: m-azure, behavior_class: c, data_boundary: external, max_attempts: 2,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 4096}, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}}
  - {id: bedrock, provider: br, model: m-bedrock, behavior_class: c, data_boundary: external, max_attempts: 2,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 4096, continuation: assistant_prefill}, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}}
  - {id: gemini, provider: gm, model: m-gemini, behavior_class: c, data_boundary: external, max_attempts: 2,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 4096}, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}}
  - {id: vertex, provider: vx, model: m-vertex, behavior_class: c, data_boundary: external, max_attempts: 2,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 4096, continuation: assistant_prefill}, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}}
models:
  - name: chat
    routes: [primary, fallback, inhouse]
    retry: {max_attempts: 3, base_delay: 50ms, max_delay: 200ms, deadline: 20s}
    stream: {after_output: resume}
  - name: chat-metered
    routes: [primary, fallback, inhouse]
    retry: {max_attempts: 3, base_delay: 50ms, max_delay: 200ms, deadline: 20s, max_cost_usd: 0.00009}
    stream: {after_output: resume}
    accept_unreachable_routes: true # its clients send max_tokens: 30
  - name: chat-spread
    routes: [[primary, fallback], inhouse]
    strategy: weighted
    retry: {max_attempts: 3, base_delay: 50ms, max_delay: 200ms, deadline: 20s}
    stream: {after_output: resume}
  - name: chat-clouds
    routes: [[azure, bedrock, vertex], gemini]
    strategy: weighted
    retry: {max_attempts: 3, base_delay: 50ms, max_delay: 200ms, deadline: 20s}
    stream: {after_output: resume}
  - name: chat-stateful
    routes: [rs-a, rs-b]
    retry: {max_attempts: 3, base_delay: 50ms, max_delay: 200ms, deadline: 20s}
lease: {ttl: 3s, renew: 1s}
log: {level: warn}
admin_key_env: CHAOS_ADMIN_KEY
`

// faults is the mock's script: about a quarter of the calls fail, each
// way the mock can fail a chat call but those that refuse the request
// itself (context length, content policy: a client's error, never
// retried, which would only make answers rarer). The stateful routes'
// calls also fail in the ways that commit a turn and then lose the reply.
var faults = mock.Script{Rules: append(append(statefulFaults("m-rs-a", "m-rs-b"), cloudCuts...), []mock.Rule{
	{Percent: 5, Fault: mock.Fault{Type: mock.FaultStatus, Status: 500}},
	{Percent: 4, Fault: mock.Fault{Type: mock.FaultStatus, Status: 429, RetryAfter: "0"}},
	{Percent: 3, Fault: mock.Fault{Type: mock.FaultReset}},
	{Percent: 3, Fault: mock.Fault{Type: mock.FaultDropAfter, After: 3}},
	{Percent: 2, Fault: mock.Fault{Type: mock.FaultStallAfter, After: 2}},
	{Percent: 1, Fault: mock.Fault{Type: mock.FaultHang}},
	{Percent: 2, Fault: mock.Fault{Type: mock.FaultSlowFirstToken, DelayMS: 300}},
	{Percent: 1, Fault: mock.Fault{Type: mock.FaultStatus, Status: 503}},
	{Percent: 1, Fault: mock.Fault{Type: mock.FaultSilentClose, DelayMS: 100}},
	{Percent: 1, Fault: mock.Fault{Type: mock.FaultMalformedAfter, After: 2}},
	{Percent: 1, Fault: mock.Fault{Type: mock.FaultNoDone}},
	{Percent: 1, Fault: mock.Fault{Type: mock.FaultStreamError, After: 2}},
	{Percent: 1, Fault: mock.Fault{Type: mock.FaultGarbage}},
	{Percent: 1, Fault: mock.Fault{Type: mock.FaultQuota}},
}...)}

// cloudCuts cut the other clouds' streams after output, each in its
// own framing: Azure OpenAI's and Gemini's SSE dropped, Vertex AI's
// Claude events dropped, a Bedrock event-stream frame that fails its
// checksum. Bedrock and Vertex continue a cut stream; Azure and Gemini
// cannot, so theirs end in band unless another route of the tier takes
// the continuation. Either way the receipt bills what the client saw.
var cloudCuts = []mock.Rule{
	{Model: "m-azure", Percent: 5, Fault: mock.Fault{Type: mock.FaultDropAfter, After: 6}},
	{Model: "m-bedrock", Percent: 5, Fault: mock.Fault{Type: mock.FaultBadCRCAfter, After: 6}},
	{Model: "m-vertex", Percent: 5, Fault: mock.Fault{Type: mock.FaultDropAfter, After: 6}},
	{Model: "m-gemini", Percent: 5, Fault: mock.Fault{Type: mock.FaultDropAfter, After: 6}},
}

// statefulFaults are the faults of a Responses API that stores
// conversations: the turn is committed, then its reply is lost (a hang,
// a reset, a 502 from the infrastructure in front, or committed twice by
// the provider's own retry).
func statefulFaults(models ...string) []mock.Rule {
	var rules []mock.Rule
	for _, m := range models {
		rules = append(rules,
			mock.Rule{Model: m, Percent: 2, Fault: mock.Fault{Type: mock.FaultCommitThenHang}},
			mock.Rule{Model: m, Percent: 3, Fault: mock.Fault{Type: mock.FaultCommitThenReset, After: 2}},
			mock.Rule{Model: m, Percent: 3, Fault: mock.Fault{Type: mock.FaultCommitThen502}},
			mock.Rule{Model: m, Percent: 2, Fault: mock.Fault{Type: mock.FaultCommitTwiceThen502}})
	}
	return rules
}

// Run soaks the gateway and checks the invariants.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m := mock.New(mock.Config{Tokens: tokens, Script: faults})
	defer m.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = m.Serve(ctx, ln) }()
	n := max(1, cfg.Replicas)
	store, coordination := "sqlite://"+filepath.Join(cfg.Dir, "ledger.db"), "local"
	var rds *redisServer
	if n > 1 {
		if cfg.Postgres == "" {
			return nil, fmt.Errorf("%d replicas need a PostgreSQL database (Config.Postgres)", n)
		}
		sc, err := newSchema(ctx, cfg.Postgres)
		if err != nil {
			return nil, err
		}
		defer sc.drop()
		if rds, err = newRedis(ctx, cfg.Dir); err != nil {
			return nil, err
		}
		defer rds.stop()
		store, coordination = sc.url, rds.url()
	}
	// The capped tenant's ceiling: about half of what its requests
	// would spend unbounded.
	ceiling := fmt.Sprintf("%.6f", float64(cfg.Requests)*2e-6)
	yaml := strings.NewReplacer("MOCK", "http://"+ln.Addr().String(), "STORE", `"`+store+`"`, "COORD", `"`+coordination+`"`,
		"DAY_CEILING", ceiling).Replace(configTemplate)
	account, err := mock.WriteServiceAccount(cfg.Dir, "http://"+ln.Addr().String())
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(cfg.Dir, "oncegate.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		return nil, err
	}
	pol, err := policy.Parse(cfgPath, []byte(yaml))
	if err != nil {
		return nil, fmt.Errorf("the soak's configuration: %w", err)
	}
	logf, err := os.Create(filepath.Join(cfg.Dir, "gateway.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	gws := make([]*gateway, n)
	for i := range gws {
		gws[i] = &gateway{bin: cfg.Binary, config: cfgPath, env: []string{"CHAOS_KEY=" + apiKey, "CHAOS_PRIVATE_KEY=" + privateKey, "CHAOS_CAPPED_KEY=" + cappedKey,
			"CHAOS_AZURE_KEY=" + mock.DefaultAzureAPIKey, "CHAOS_VERTEX_SA=" + account, "CHAOS_GEMINI_KEY=" + mock.DefaultGeminiAPIKey,
			"AWS_ACCESS_KEY_ID=" + mock.DefaultAWS.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + mock.DefaultAWS.SecretAccessKey, "AWS_SESSION_TOKEN=",
			"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "CHAOS_ADMIN_KEY=" + adminKey}, log: logf}
		if err := gws[i].start(ctx); err != nil {
			return nil, err
		}
		defer gws[i].stop()
	}
	var pickMu sync.Mutex
	pickRng := rand.New(rand.NewPCG(cfg.Seed, 0x91c4))
	// pick is a gateway that is up, at random; "" while none is.
	pick := func() string {
		pickMu.Lock()
		defer pickMu.Unlock()
		for _, i := range pickRng.Perm(n) {
			if u := gws[i].url(); u != "" {
				return u
			}
		}
		return ""
	}

	rep := &Report{Requests: cfg.Requests, Replicas: n}
	outcomes := make([]outcome, cfg.Requests)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xc4a05))
	kindOf := make([]string, cfg.Requests)
	profOf := make([]profile, cfg.Requests)
	for i := range kindOf {
		kindOf[i] = kinds[rng.IntN(len(kinds))]
		profOf[i] = drawProfile(rng.IntN(100), rng.Float64())
		if kindOf[i] == kindConversation || kindOf[i] == kindStateful {
			profOf[i] = plain
		}
	}
	var next, done atomic.Int64
	progressed := make(chan struct{}, 1)
	var wg sync.WaitGroup
	churn := &keyChurn{pick: pick}
	churnStop := make(chan struct{})
	churnDone := make(chan struct{})
	go func() { defer close(churnDone); churn.run(ctx, churnStop) }()
	for range max(1, cfg.Workers) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.Requests || ctx.Err() != nil {
					return
				}
				base := pick()
				for base == "" && pause(ctx, 10*time.Millisecond) { // every gateway is restarting
					base = pick()
				}
				rctx, rcancel := context.WithTimeout(ctx, 60*time.Second)
				outcomes[i] = do(rctx, base, pick, kindOf[i], profOf[i], i)
				rcancel()
				done.Add(1)
				select {
				case progressed <- struct{}{}:
				default:
				}
			}
		})
	}
	// The driver: a kill (and a restart) each time another share of the
	// requests has finished.
	for k := 1; k <= cfg.Kills; k++ {
		at := int64(k * cfg.Requests / (cfg.Kills + 1))
		for done.Load() < at && ctx.Err() == nil {
			select {
			case <-progressed:
			case <-ctx.Done():
			}
		}
		g := gws[rng.IntN(n)]
		g.kill()
		rep.Kills++
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "kill %d after %d requests\n", k, done.Load())
		}
		if rds != nil && k%3 == 0 {
			rds.stop()
			rep.RedisRestarts++
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "Redis restarted\n")
			}
			if err := rds.start(ctx); err != nil {
				cancel()
				wg.Wait()
				return nil, err
			}
		}
		if err := g.start(ctx); err != nil {
			cancel()
			wg.Wait()
			return nil, fmt.Errorf("restart after kill %d: %w", k, err)
		}
	}
	wg.Wait()
	close(churnStop)
	<-churnDone
	// A last restart of every gateway settles what the kills left in
	// progress.
	for _, g := range gws {
		g.kill()
		if err := g.start(ctx); err != nil {
			return nil, err
		}
	}
	st, err := openStore(ctx, store)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	if err := settled(ctx, st); err != nil {
		return nil, err
	}
	if err := finishConversations(ctx, gws[0].url(), outcomes); err != nil {
		return nil, err
	}
	rep, err = check(ctx, rep, outcomes, m, pol, gws[0], st)
	if err != nil {
		return nil, err
	}
	rep.Rows = append(rep.Rows, churn.check(ctx, gws, rep.example))
	return rep, nil
}

// readStore is what the checker reads of the ledger.
type readStore interface {
	Receipts(ctx context.Context, tenant string, limit int, after string) ([][]byte, error)
	ConversationTurns(ctx context.Context, tenant, conversation string) ([]*ledger.Turn, error)
	Orphans(ctx context.Context, tenant, conversation string) ([]*ledger.Orphan, error)
	Events(ctx context.Context, requestID string) ([]ledger.Event, error)
	Close() error
	inProgress(ctx context.Context) (int, error)
}

// openStore opens the soak's ledger to read.
func openStore(ctx context.Context, store string) (readStore, error) {
	if path, ok := strings.CutPrefix(store, "sqlite://"); ok {
		st, err := sqlite.OpenReadOnly(path)
		if err != nil {
			return nil, err
		}
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
		if err != nil {
			_ = st.Close()
			return nil, err
		}
		return &sqliteRead{Store: st, db: db}, nil
	}
	st, err := postgres.OpenReadOnly(ctx, store)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, store)
	if err != nil {
		st.Close()
		return nil, err
	}
	return &postgresRead{Store: st, conn: conn}, nil
}

type sqliteRead struct {
	*sqlite.Store
	db *sql.DB
}

func (s *sqliteRead) inProgress(ctx context.Context) (n int, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT count(*) FROM requests WHERE state = 'in_progress'`).Scan(&n)
	return n, err
}

func (s *sqliteRead) Close() error { _ = s.db.Close(); return s.Store.Close() }

type postgresRead struct {
	*postgres.Store
	conn *pgx.Conn
}

func (s *postgresRead) inProgress(ctx context.Context) (n int, err error) {
	err = s.conn.QueryRow(ctx, `SELECT count(*) FROM requests WHERE state = 'in_progress'`).Scan(&n)
	return n, err
}

func (s *postgresRead) Close() error {
	_ = s.conn.Close(context.Background())
	s.Store.Close()
	return nil
}

// settled waits until the ledger holds no request in progress.
func settled(ctx context.Context, st readStore) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n, err := st.inProgress(ctx)
		if err != nil {
			return fmt.Errorf("read the ledger: %w", err)
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d requests still in progress two minutes after the last restart", n)
		}
		// Recovery runs in the gateways; no event reaches this process.
		if !pause(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// check reads the mock's counts, the ledger's receipts and the clients'
// outcomes, and fills the report's rows.
func check(ctx context.Context, rep *Report, outcomes []outcome, m *mock.Mock, pol *policy.Policy, g *gateway, st readStore) (*Report, error) {
	receipts := map[string]*receipt.Receipt{}
	for _, tn := range pol.Tenants {
		for after := ""; ; {
			page, err := st.Receipts(ctx, tn.ID, 500, after)
			if err != nil {
				return nil, fmt.Errorf("list receipts: %w", err)
			}
			for _, b := range page {
				r, err := receipt.Parse(b)
				if err != nil {
					return nil, err
				}
				// Stored receipts are sealed when they are read, as the
				// gateway and `oncegate receipts` do.
				if err := r.Seal(); err != nil {
					return nil, fmt.Errorf("seal receipt %s: %w", r.RequestID, err)
				}
				receipts[r.RequestID] = r
				after = r.RequestID
			}
			if len(page) < 500 {
				break
			}
		}
	}
	stats := m.Stats()
	// A request settled by a gateway that died before it rebuilt the
	// receipt has none stored yet: the API rebuilds it on demand, as it
	// does for any client that asks (docs/identity.md).
	onDemand := 0
	for id := range stats.ByRequestID {
		if receipts[id] != nil {
			continue
		}
		if r, err := fetchReceipt(ctx, g.url(), id); err == nil {
			receipts[id] = r
			onDemand++
		}
	}
	rep.Receipts = len(receipts)
	rep.Calls = stats.Requests
	example := rep.example

	// 1. Every upstream call is an attempt of a receipt, and every
	// attempt a call — but for attempts a kill cut between their durable
	// dispatch and their send.
	calls := Row{Invariant: "upstream calls = Σ receipt attempts"}
	var attempts, cut, unsent int64
	for id, r := range receipts {
		calls.Checked++
		sent, n := stats.ByRequestID[id].Requests, int64(len(r.Attempts))
		attempts += n
		// An attempt that failed before its request left is no call:
		// it never got a connection to send on (the gateway says
		// "upstream connect …": refused, or its deadline came first), or
		// the upstream conversation it needed could not be created. The
		// mock's count checks that claim: it must then see exactly the
		// other attempts. One cut while its request was being written
		// ("upstream write …") reached the provider whole only if the
		// cut came in the instant after its last byte: it may count.
		never, maybe := int64(0), int64(0)
		for _, a := range r.Attempts {
			switch {
			case a.Error == nil:
			case strings.HasPrefix(a.Error.Message, "upstream connect "), strings.HasPrefix(a.Error.Message, "create the upstream conversation"):
				never++
			case strings.HasPrefix(a.Error.Message, "upstream write "):
				maybe++
			}
		}
		unsent += never + maybe
		switch {
		case sent >= n-never-maybe && sent <= n-never:
			unsent -= sent - (n - never - maybe)
		case sent < n-never-maybe && r.Terminal == string(gw.TerminalIndeterminate):
			cut += n - never - maybe - sent
		default:
			calls.Violations++
			var errs []string
			for _, a := range r.Attempts {
				if a.Error != nil {
					errs = append(errs, fmt.Sprintf("attempt %d: %s", a.Ordinal, a.Error.Message))
				}
			}
			example("%s: the provider saw %d calls, the receipt has %d attempts (terminal %s; %s)", id, sent, n, r.Terminal, strings.Join(errs, "; "))
		}
	}
	for id, c := range stats.ByRequestID {
		if receipts[id] == nil {
			calls.Violations++
			example("%s: %d upstream calls and no receipt", id, c.Requests)
		}
	}
	calls.Note = fmt.Sprintf("%d calls, %d attempts; %d dispatched attempts cut by a kill before they were sent, %d that could not leave; %d receipts rebuilt on demand",
		rep.Calls, attempts, cut, unsent, onDemand)
	rep.Rows = append(rep.Rows, calls)

	// 2. At most one committed answer per logical request.
	one := Row{Invariant: "at most one committed answer per logical request"}
	for id, r := range receipts {
		one.Checked++
		ok := 0
		for _, a := range r.Attempts {
			if a.Kind == string(gw.KindOK) {
				ok++
			}
		}
		if ok > 1 {
			one.Violations++
			example("%s: %d successful attempts", id, ok)
		}
	}
	rep.Rows = append(rep.Rows, one)

	// 3. Every receipt passes verify: no attempt after a terminal, a
	// deadline, a budget; routes in order; digests whole.
	ver := Row{Invariant: "every receipt passes oncegate verify"}
	for id, r := range receipts {
		ver.Checked++
		if drifts := receipt.Verify(pol, r); len(drifts) > 0 {
			ver.Violations++
			example("%s: %s\n    %s", id, drifts[0], story(ctx, st, r))
		}
	}
	rep.Rows = append(rep.Rows, ver)
	rep.Rows = append(rep.Rows, bounds(receipts, outcomes, pol, example)...)

	// 4 and 5 need the gateway: every answered request has its receipt,
	// and every answer read is one clean generation.
	has := Row{Invariant: "every answered logical request has its receipt"}
	clean := Row{Invariant: "every answer a client read is one clean generation"}
	for i, o := range outcomes {
		if o.ok {
			rep.Answered++
		}
		if o.kind == kindConversation || o.kind == kindStateful {
			// Every answered turn: its receipt, and the answer to the
			// conversation as it stood, generated once.
			var history []string
			for k, tn := range o.turns {
				history = append(history, tn.input)
				has.Checked++
				if tn.requestID == "" || receipts[tn.requestID] == nil {
					has.Violations++
					example("conversation %d turn %d: answered, request id %q, no receipt", i, k+1, tn.requestID)
				}
				clean.Checked++
				if want := mock.AnswerTo(0, "", history, tokens); tn.text != want {
					clean.Violations++
					example("conversation %d turn %d: read %q, one generation is %q", i, k+1, tn.text, want)
				}
				history = append(history, tn.text)
			}
			continue
		}
		if !o.ok {
			continue
		}
		has.Checked++
		if o.requestID == "" || receipts[o.requestID] == nil {
			has.Violations++
			example("request %d (%s): answered, request id %q, no receipt", i, o.kind, o.requestID)
		}
		clean.Checked++
		if want := mock.AnswerFor(0, o.prompt, tokens); o.text != want {
			clean.Violations++
			example("request %d (%s): read %q, one generation is %q", i, o.kind, o.text, want)
		}
	}
	rep.Rows = append(rep.Rows, has, clean, billedShown(receipts, outcomes, example))

	// 6. Conversations: every committed turn has as many assistant turns
	// as user turns before it, along its chain, and no user action — one
	// body on one response; every turn of the workload says something
	// new — has two committed turns. (A response may be continued many
	// times, by different user actions: a branch is not a duplicate.)
	turns := Row{Invariant: "conversations: assistant ÷ user turns = 1, one turn per user action"}
	actions := map[string]string{}
	for id, r := range receipts {
		c := r.Conversation
		if c == nil || r.Terminal != string(gw.TerminalSucceeded) {
			continue
		}
		turns.Checked++
		if c.UserTurns != c.AssistantTurns || c.UserTurns != c.Turn {
			turns.Violations++
			example("%s: turn %d with %d user and %d assistant turns", id, c.Turn, c.UserTurns, c.AssistantTurns)
		}
		action := r.Tenant + "/" + c.PreviousResponseID + "/" + r.RequestSHA256
		if other, ok := actions[action]; ok && other != c.ResponseID {
			turns.Violations++
			example("%s: one user action on response %q committed twice, as %s and %s", id, c.PreviousResponseID, other, c.ResponseID)
		}
		actions[action] = c.ResponseID
	}
	rep.Rows = append(rep.Rows, turns)
	prov, err := providerConversations(ctx, receipts, outcomes, m, st, example)
	if err != nil {
		return nil, err
	}
	rep.Rows = append(rep.Rows, prov)

	// 7. Every key, POSTed again after the run: an answer comes back
	// byte for byte, anything else as it ended — and no provider is
	// called again (no indeterminate request is re-sent blind).
	replay := Row{Invariant: "acknowledged answers replay byte for byte"}
	blind := Row{Invariant: "re-POSTs after the run reach no provider"}
	before := m.Requests()
	ranAgain, ranAgainCalls := 0, int64(0)
	for i, o := range outcomes {
		if o.key == "" || o.requestID == "" || receipts[o.requestID] == nil {
			continue // the gateway never took this key (a kill refused the connection)
		}
		blind.Checked++
		r := receipts[o.requestID]
		calls := m.Requests()
		status, b, h, err := post(ctx, g.url(), o.prof, o.key, "/v1/chat/completions", chatBody(o.prompt, o.stream, o.prof))
		if err != nil {
			return nil, fmt.Errorf("re-POST %s: %w", o.key, err)
		}
		if r.Terminal == string(gw.TerminalIndeterminate) && status != 502 {
			blind.Violations++
			example("request %d: indeterminate, re-POST answered %d", i, status)
		}
		// A request that sent nothing, or was cancelled before any
		// output was shown, released its key (docs/identity.md): the
		// re-POST is a new request, and may be sent. Any other must
		// replay what it ended with.
		if sent := m.Requests() - calls; sent > 0 {
			if len(r.Attempts) == 0 || r.Terminal == string(gw.TerminalCancelled) {
				ranAgain++
				ranAgainCalls += sent
			} else {
				blind.Violations++
				example("request %d (%s): ended %s/%s, and its re-POST made %d upstream calls (%d %s)", i, o.kind, r.Terminal, r.Reason, sent,
					status, h.Get("X-Oncegate-Dedup"))
			}
		}
		if !o.ok {
			continue
		}
		replay.Checked++
		text, _ := answerText(b, o.stream)
		if status != 200 || h.Get("X-Oncegate-Dedup") != "replayed" || (!o.stream && !bytes.Equal(b, o.body)) || text != o.text {
			replay.Violations++
			example("request %d (%s): replay %d %s, %d bytes vs %d", i, o.kind, status, h.Get("X-Oncegate-Dedup"), len(b), len(o.body))
		}
	}
	// A stateful conversation's keyed first turn, sent again, is its
	// first answer.
	for i, o := range outcomes {
		if o.kind != kindStateful || len(o.turns) == 0 {
			continue
		}
		blind.Checked++
		replay.Checked++
		first := map[string]any{"model": statefulModel, "input": o.turns[0].input}
		if o.stream {
			first["stream"] = true
		}
		body, _ := json.Marshal(first)
		calls := m.Requests()
		status, b, h, err := post(ctx, g.url(), o.prof, statefulKey(i, 1), "/v1/responses", body)
		if err != nil {
			return nil, fmt.Errorf("re-POST %s: %w", statefulKey(i, 1), err)
		}
		if sent := m.Requests() - calls; sent > 0 {
			blind.Violations++
			example("stateful conversation %d: its answered first turn, sent again, made %d upstream calls", i, sent)
		}
		if id := responseID(b, o.stream); status != 200 || h.Get("X-Oncegate-Dedup") != "replayed" || id != o.turns[0].responseID {
			replay.Violations++
			example("stateful conversation %d: its first turn sent again answered %d %s, response %q, not %q",
				i, status, h.Get("X-Oncegate-Dedup"), id, o.turns[0].responseID)
		}
	}
	blind.Note = fmt.Sprintf("%d upstream calls in all; %d of them from %d keys sent again after their request released them (it sent nothing, or was cancelled before any output)",
		m.Requests()-before, ranAgainCalls, ranAgain)
	rep.Rows = append(rep.Rows, replay, blind)
	return rep, nil
}

// story is a receipt's attempts and decisions and its request's event
// log, in a line each: what a violation is diagnosed from.
func story(ctx context.Context, st readStore, r *receipt.Receipt) string {
	var b strings.Builder
	fmt.Fprintf(&b, "model %s, tenant %s, stream %v, terminal %s/%s", r.Model, r.Tenant, r.Stream, r.Terminal, r.Reason)
	for _, a := range r.Attempts {
		fmt.Fprintf(&b, "\n    attempt %d %s %s/%s cost %.9f reserved %.9f", a.Ordinal, a.Route, a.OutcomeClass, a.Kind, a.CostUSD, a.ReservedUSD)
		if a.Error != nil {
			fmt.Fprintf(&b, " (%s)", a.Error.Message)
		}
	}
	for _, d := range r.Decisions {
		fmt.Fprintf(&b, "\n    after %d: %s %s %s/%s", d.AfterAttempt, d.Action, d.Route, d.Terminal, d.Reason)
	}
	evs, err := st.Events(ctx, r.RequestID)
	if err != nil {
		return b.String() + "\n    events: " + err.Error()
	}
	for _, e := range evs {
		fmt.Fprintf(&b, "\n    event %d gen %d %s %s", e.Seq, e.Generation, e.Type, firstLine(e.Data))
	}
	return b.String()
}

// fetchReceipt asks the gateway for a receipt, as a client would: under
// each tenant's key until one owns it.
func fetchReceipt(ctx context.Context, base, id string) (r *receipt.Receipt, err error) {
	for _, key := range []string{apiKey, privateKey, cappedKey} {
		if r, err = fetchReceiptAs(ctx, base, id, key); err == nil {
			return r, nil
		}
	}
	return nil, err
}

func fetchReceiptAs(ctx context.Context, base, id, key string) (*receipt.Receipt, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/receipts/"+id, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != 200 {
		return nil, fmt.Errorf("GET receipt %s: %d %s", id, res.StatusCode, firstLine(b))
	}
	r, err := receipt.Parse(b)
	if err != nil {
		return nil, err
	}
	return r, r.Seal()
}
