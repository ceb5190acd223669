// Package chaos is the soak with an invariant checker (docs/chaos.md):
// logical requests from the official SDKs at their default retries and
// from raw clients that re-POST, streaming and not, OpenAI and Anthropic,
// through a gateway that is SIGKILLed and restarted while they run, in
// front of a mock provider that fails a fifth of its calls in every way
// it can. At the end it reads the mock's own counts, the ledger and every
// receipt, and reports each invariant with its count of violations.
package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/policy"
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
