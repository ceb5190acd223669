// Package config reads oncegate's YAML configuration (docs/configuration.md) strictly:
// unknown fields, wrong types, malformed durations and missing required
// fields are errors naming file:line:column and the field path, and every
// problem in a file is reported at once.
//
// The struct tree below is the configuration reference: each field's doc
// comment states its meaning and default. Semantic rules that relate fields
// to each other (route references, capability coverage, data boundaries)
// live in package policy, which reports violations with the positions kept
// here.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is a whole configuration file.
type Config struct {
	// Listen is the gateway's HTTP address. Default "127.0.0.1:8080".
	Listen string `yaml:"listen" default:"127.0.0.1:8080"`
	// Store is where the ledger, receipts and conversations live:
	// "sqlite://PATH" (a relative PATH is relative to the configuration
	// file's directory), "postgres://…" (several replicas; a password is
	// best left out of the URL: PGPASSFILE or PGPASSWORD; a primary and
	// its standbys are listed host:port,host:port with
	// ?target_session_attrs=read-write, docs/replicas.md) or "memory://"
	// (in the process only: nothing outlives it). Default
	// "sqlite://oncegate.db".
	Store string `yaml:"store" default:"sqlite://oncegate.db"`
	// Coordination is where in-flight claims, joins, breakers and the fleet
	// retry budget are shared: "local" (one process) or, for replicas, one
	// Redis server "redis://host:port/db", a master Redis Sentinel fails
	// over "redis+sentinel://host:port,host:port/db?master_name=NAME", or
	// a Redis Cluster "redis+cluster://host:port,host:port" (rediss… for
	// TLS; docs/replicas.md). ?key_prefix=NAME: namespaces the keys —
	// quote such a URL in YAML, "redis://host:6379/0?key_prefix=NAME:", as
	// a plain value ending in ":" is not YAML. Default "local".
	Coordination string `yaml:"coordination" default:"local"`
	// SecretEnv names the environment variable holding the fingerprint
	// HMAC secret; at most one of secret_env and secret_file. Empty (the
	// default): a secret is generated once and kept in the store.
	SecretEnv string `yaml:"secret_env"`
	// SecretFile names a file holding the fingerprint HMAC secret (a
	// relative path is relative to the configuration file's directory;
	// surrounding whitespace is ignored), for secrets mounted as files.
	SecretFile string `yaml:"secret_file"`
	// AdminKeyEnv names the environment variable holding the admin key:
	// the key that reads /metrics on the API port, reloads, and sees every
	// tenant in the console. It must differ from every tenant's key; at
	// most one of admin_key_env and admin_key_file. Empty (the default): no
	// admin key.
	AdminKeyEnv string `yaml:"admin_key_env"`
	// AdminKeyFile names a file holding the admin key, read at start and
	// on every reload.
	AdminKeyFile string `yaml:"admin_key_file"`
	// AdminTenant names a tenant of this file whose requests the admin key
	// may also send to /v1/*, as LiteLLM's master key does
	// (docs/migrating-from-litellm.md); it needs an admin key, and that
	// tenant needs no key of its own. Empty (the default): the admin key
	// calls no model.
	AdminTenant string `yaml:"admin_tenant"`
	// MetricsListen is a separate address serving /metrics with no key
	// (keep it private), e.g. "127.0.0.1:9464". Empty (the default):
	// /metrics is served on the API port, to the admin key only — never
	// open there.
	MetricsListen string `yaml:"metrics_listen"`

	// Tenants are the gateway's callers, one API key each. Required.
	Tenants []Tenant `yaml:"tenants" required:"true"`
	// Providers are the upstream APIs. Required.
	Providers []Provider `yaml:"providers" required:"true"`
	// Routes are exact upstream paths: provider, model, release. Required.
	Routes []Route `yaml:"routes" required:"true"`
	// Models are the aliases clients name in "model". Required.
	Models []Model `yaml:"models" required:"true"`

	// Idempotency configures the ledger's key handling (docs/identity.md).
	Idempotency Idempotency `yaml:"idempotency"`
	// Ledger configures how durably the store commits (docs/durability.md)
	// and how long it keeps receipts (docs/receipts.md).
	Ledger Ledger `yaml:"ledger"`
	// Conversations configures the turns of /v1/responses
	// (docs/conversations.md).
	Conversations Conversations `yaml:"conversations"`
	// RetryBudget bounds retries across the fleet (docs/overload.md).
	RetryBudget RetryBudget `yaml:"retry_budget"`
	// Breaker configures every route's circuit breaker (docs/overload.md).
	Breaker Breaker `yaml:"breaker"`
	// Limits bounds what one request may carry and receive.
	Limits Limits `yaml:"limits"`
	// Log configures the log lines (docs/operations.md).
	Log Log `yaml:"log"`
	// Telemetry configures traces (docs/operations.md).
	Telemetry Telemetry `yaml:"telemetry"`
	// Alerts configures the alerts the gateway sends itself, beside its
	// metrics (docs/operations.md, "Budget alerts").
	Alerts Alerts `yaml:"alerts"`
	// DrainTimeout bounds a graceful stop (SIGTERM, SIGINT): how long the
	// requests and streams in flight may take to finish before the rest
	// are cut. /readyz says not ready from the drain's first moment.
	DrainTimeout Duration `yaml:"drain_timeout" default:"30s"`
	// DropParams: a droppable request field the chosen route cannot carry
	// (docs/translation.md) is dropped — named in X-Oncegate-Dropped and
	// the receipt — instead of keeping the request off that route. Also
	// per alias, per tenant, per virtual key and in the request body; the
	// narrowest that sets it wins. Default false.
	DropParams bool `yaml:"drop_params"`
	// Lease is how a request's owner holds it while it runs
	// (docs/identity.md, docs/replicas.md): what bounds how long a request whose gateway died stays in
	// progress before another settles it.
	Lease Lease `yaml:"lease"`

	file    string
	present map[string]Pos
}

// Ledger configures the store's commits and what it keeps.
type Ledger struct {
	// Sync is how durable an acknowledged write is: "full" — it survives
	// power loss (SQLite synchronous=FULL, PostgreSQL's synchronous_commit
	// as the server sets it) — or "normal" — it survives any crash of the
	// gateway's process, but the last commits before a power loss or an
	// operating-system crash may be lost (SQLite synchronous=NORMAL,
	// PostgreSQL synchronous_commit=off). Default "full".
	Sync string `yaml:"sync" default:"full"`
	// ReceiptRetention is how long receipts and attempt events are kept:
	// a sweep deletes those of requests that arrived longer ago than
	// this, never while the request's idempotency record (and the stored
	// answer replays send) is still kept, and the space they held is
	// reused (docs/receipts.md, "Retention"). Archive them first with
	// `oncegate receipts export --before T`. Day and month spend limits
	// are counted apart from receipts: a sweep never frees a budget. 0
	// keeps them forever; a negative value is an error. Default 2160h (90
	// days).
	ReceiptRetention Duration `yaml:"receipt_retention" default:"2160h"`
}

// Tenant is one authenticated caller.
type Tenant struct {
	// ID names the tenant in receipts and metrics. Required.
	ID string `yaml:"id" required:"true"`
	// APIKeyEnv names the environment variable holding the tenant's
	// gateway API key. Exactly one of api_key_env and api_key_file is
	// required; the key itself never appears in the file. A process's
	// environment is fixed when it starts: a key a reload should pick up
	// belongs in a file.
	APIKeyEnv string `yaml:"api_key_env"`
	// APIKeyFile names a file holding the tenant's key (a relative path is
	// relative to the configuration file's directory; surrounding
	// whitespace is ignored), read at start and on every reload: a key
	// mounted as a file (a Kubernetes secret, a systemd credential) is
	// rotated by changing the file and reloading.
	APIKeyFile string `yaml:"api_key_file"`
	// APIKeyEnvs name more variables holding more keys of the same
	// tenant, valid at once.
	APIKeyEnvs []string `yaml:"api_key_envs"`
	// APIKeyFiles name more files holding more keys of the same tenant,
	// valid at once: rotate a key without downtime by adding a file with
	// the new one here, reloading, moving the clients, then dropping the
	// old and reloading (docs/operations.md).
	APIKeyFiles []string `yaml:"api_key_files"`
	// MaxDataBoundary is the widest boundary this tenant's data may cross:
	// local, private or external. Default "external".
	MaxDataBoundary string `yaml:"max_data_boundary" default:"external"`
	// Budget limits the tenant's rate and spend. Zero values mean unlimited.
	Budget TenantBudget `yaml:"budget"`
	// DropParams, when set, is drop_params for the tenant's requests,
	// over the alias's and the top level's, under a virtual key's
	// (docs/translation.md).
	DropParams *bool `yaml:"drop_params"`
}

// TenantBudget limits one tenant (docs/overload.md).
type TenantBudget struct {
	// RequestsPerMinute caps logical requests per minute. 0 (default): no cap.
	RequestsPerMinute int `yaml:"requests_per_minute"`
	// CostUSDPerDay caps the reserved plus charged cost per UTC day.
	// 0 (default): no cap.
	CostUSDPerDay float64 `yaml:"cost_usd_per_day"`
	// CostUSDPerMonth caps the reserved plus charged cost per UTC month
	// (it resets on the 1st, 00:00 UTC). 0 (default): no cap.
	CostUSDPerMonth float64 `yaml:"cost_usd_per_month"`
	// CostUSDTotal caps the reserved plus charged cost over the tenant's
	// whole life; it never resets, and deleting old receipts frees none
	// of it. 0 (default): no cap.
	CostUSDTotal float64 `yaml:"cost_usd_total"`
	// MaxConcurrent caps the tenant's requests in progress at once on
	// each gateway process, refused with 429 before their bodies are
	// read. 0 (default): no cap.
	MaxConcurrent int `yaml:"max_concurrent"`
}

// Provider is one upstream API endpoint. Which keys beyond id, type,
// timeouts, headers and query a provider may or must set depends on its
// type (docs/providers.md); the policy asks the provider registry.
type Provider struct {
	// ID names the provider in routes and receipts. Required.
	ID string `yaml:"id" required:"true"`
	// Type is the provider type: "openai" (Chat Completions), "anthropic"
	// (Messages), "openai-responses", "azure-openai", "bedrock", "gemini"
	// or "vertex" (docs/providers.md). Required.
	Type string `yaml:"type" required:"true"`
	// BaseURL is the API root, e.g. "https://api.openai.com/v1". Required
	// by most types; a type with a well-known endpoint has a default
	// (docs/providers.md).
	BaseURL string `yaml:"base_url"`
	// APIKeyEnv names the environment variable holding the provider key;
	// at most one of api_key_env and api_key_file. Empty (default):
	// requests carry no key (a local server or the mock).
	APIKeyEnv string `yaml:"api_key_env"`
	// APIKeyFile names a file holding the provider key, read at start and
	// on every reload (a relative path is relative to the configuration
	// file's directory).
	APIKeyFile string `yaml:"api_key_file"`
	// APIVersion is azure-openai's api-version query parameter. Empty
	// (default): the v1 API (docs/providers.md).
	APIVersion string `yaml:"api_version"`
	// Auth is how azure-openai authenticates: "key" (default) sends the
	// key of api_key_env or api_key_file in the api-key header; "entra"
	// sends a Microsoft Entra ID token from the Azure credential chain
	// (environment, workload identity, managed identity, Azure CLI) as
	// Authorization: Bearer, and takes no api_key_env or api_key_file
	// (docs/providers.md).
	Auth string `yaml:"auth"`
	// TenantID is the Microsoft Entra tenant of auth: entra. Default: the
	// AZURE_TENANT_ID environment variable.
	TenantID string `yaml:"tenant_id"`
	// ClientID is the application (client) id of auth: entra: the app
	// registration, or the user-assigned managed identity. Default: the
	// AZURE_CLIENT_ID environment variable (none: a system-assigned
	// managed identity).
	ClientID string `yaml:"client_id"`
	// Region is bedrock's AWS region, e.g. "us-east-1".
	Region string `yaml:"region"`
	// AWSProfile names bedrock's shared-config profile. Empty (default):
	// the AWS default credential chain.
	AWSProfile string `yaml:"aws_profile"`
	// Project is vertex's Google Cloud project id.
	Project string `yaml:"project"`
	// Location is vertex's region, e.g. "us-east5".
	Location string `yaml:"location"`
	// Publisher is vertex's model publisher: "google" or "anthropic".
	Publisher string `yaml:"publisher"`
	// CredentialsFileEnv names the environment variable holding the path
	// of vertex's service-account JSON file.
	CredentialsFileEnv string `yaml:"credentials_file_env"`
	// Headers are extra request headers sent on every request to this
	// provider; each value is a string, {env: NAME} or {file: PATH}, read
	// at start and on every reload and never logged. Default: none.
	Headers Values `yaml:"headers"`
	// Query are extra query parameters sent on every request to this
	// provider, in the same forms as headers. Default: none.
	Query Values `yaml:"query"`
	// Timeouts bound each phase of one attempt.
	Timeouts Timeouts `yaml:"timeouts"`
}

// Timeouts bound one attempt's phases.
type Timeouts struct {
	// Connect bounds TCP and TLS set-up. Default 5s.
	Connect Duration `yaml:"connect" default:"5s"`
	// FirstByte bounds the wait for response headers after the request was
	// sent. Default 30s.
	FirstByte Duration `yaml:"first_byte" default:"30s"`
	// Idle bounds the silence between two stream chunks. Default 30s.
	Idle Duration `yaml:"idle" default:"30s"`
}

// Route is one exact upstream path with its contract.
type Route struct {
	// ID names the route in aliases and receipts. Required, unique.
	ID string `yaml:"id" required:"true"`
	// Provider is the ID of the provider serving this route. Required.
	Provider string `yaml:"provider" required:"true"`
	// Model is the provider's model name sent upstream. Required.
	Model string `yaml:"model" required:"true"`
	// Release pins the exact model release (e.g. "gpt-4o-2024-08-06").
	// Default: the model name.
	Release string `yaml:"release"`
	// Capabilities is what the route can serve.
	Capabilities Capabilities `yaml:"capabilities"`
	// BehaviorClass names the evaluated behaviour contract the route meets.
	// Required.
	BehaviorClass string `yaml:"behavior_class" required:"true"`
	// DataBoundary is where data sent to this route travels: local,
	// private or external. Required.
	DataBoundary string `yaml:"data_boundary" required:"true"`
	// SupportsIdempotency: the receiver dedupes by Idempotency-Key.
	// Default false.
	SupportsIdempotency bool `yaml:"supports_idempotency"`
	// MaxAttempts caps attempts on this route per logical request; at
	// least 1. Required.
	MaxAttempts int `yaml:"max_attempts" required:"true"`
	// Price is what the route charges. Default: the model catalogue's
	// price for model (oncegate models; docs/routing.md), else 0 (free, e.g.
	// local), which check warns of.
	Price Price `yaml:"price"`
	// Weight is the route's share of its tier's traffic under strategy
	// weighted. Default 1.
	Weight int `yaml:"weight" default:"1"`
	// RPM and TPM are the route's own requests and tokens per minute,
	// which strategy quota keeps under beside the provider's rate-limit
	// headers (docs/routing.md). Default 0: none.
	RPM int `yaml:"rpm"`
	TPM int `yaml:"tpm"`
}

// RouteTier is one entry of an alias's routes: one route's ID, or a list
// of route IDs that share load as one tier.
type RouteTier []string

func (t *RouteTier) decodeNode(n *yaml.Node, path string, fail func(n *yaml.Node, path, format string, args ...any)) {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag != "!!str" {
			fail(n, path, "want a route id, found %s %q", tagName(n.Tag), n.Value)
			return
		}
		*t = RouteTier{n.Value}
	case yaml.SequenceNode:
		if len(n.Content) == 0 {
			fail(n, path, "an empty tier: list the routes that share load, or remove it")
			return
		}
		out := make(RouteTier, 0, len(n.Content))
		for i, item := range n.Content {
			if item.Kind != yaml.ScalarNode || item.Tag != "!!str" {
				fail(item, fmt.Sprintf("%s[%d]", path, i), "want a route id in a tier, found %s (tiers do not nest)", kindName(item))
				continue
			}
			out = append(out, item.Value)
		}
		*t = out
	default:
		fail(n, path, "want a route id or a list of them (a tier), found %s", kindName(n))
	}
}

// Capabilities is a route's capability contract.
type Capabilities struct {
	// Input lists accepted modalities: text, image, audio. Default [text].
	Input []string `yaml:"input" default:"text"`
	// Tools: the route accepts tool definitions and emits tool calls.
	Tools bool `yaml:"tools"`
	// JSONSchema: the route enforces a strict JSON schema response format.
	JSONSchema bool `yaml:"json_schema"`
	// Streaming: the route can stream (SSE).
	Streaming bool `yaml:"streaming"`
	// MaxContextTokens is the route's context window. Default: the model
	// catalogue's for the route's model, else 8192.
	MaxContextTokens int64 `yaml:"max_context_tokens" default:"8192"`
	// MaxOutputTokens caps one generation. Default: the model
	// catalogue's for the route's model, else 4096.
	MaxOutputTokens int64 `yaml:"max_output_tokens" default:"4096"`
	// Continuation is how the route continues a partial answer (
	// docs/streaming.md): none, assistant_prefill, prefix_flag, continue_final_message.
	// Default "none".
	Continuation string `yaml:"continuation" default:"none"`
}

// Price is a route's token price.
type Price struct {
	// InputUSDPerMTok is USD per million input tokens. Default 0.
	InputUSDPerMTok float64 `yaml:"input_usd_per_mtok"`
	// OutputUSDPerMTok is USD per million output tokens. Default 0.
	OutputUSDPerMTok float64 `yaml:"output_usd_per_mtok"`
	// CachedInputUSDPerMTok is USD per million input tokens read from the
	// provider's prompt cache. Unset: the input price.
	CachedInputUSDPerMTok *float64 `yaml:"cached_input_usd_per_mtok"`
	// CacheWriteUSDPerMTok is USD per million input tokens written to the
	// provider's prompt cache (Anthropic's cache_creation_input_tokens).
	// Unset: the input price.
	CacheWriteUSDPerMTok *float64 `yaml:"cache_write_usd_per_mtok"`
}

// Model is one model alias: ordered routes and a retry policy.
type Model struct {
	// Name is what clients put in "model". Required, unique.
	Name string `yaml:"name" required:"true"`
	// Routes lists route IDs in priority order (primary first); an entry
	// that is itself a list is a tier of routes that share load
	// ([[east, west], fallback]), spread by Strategy (docs/routing.md).
	// Required.
	Routes []RouteTier `yaml:"routes" required:"true"`
	// Strategy is how a tier of several routes shares load: ordered (the
	// first by priority), weighted (by each route's weight), least_busy
	// (fewest attempts in flight), latency (lowest recent time to first
	// token, with exploration) or quota (most rate-limit headroom).
	// Default ordered.
	Strategy string `yaml:"strategy" default:"ordered"`
	// Require is what every route of the alias must satisfy.
	Require Require `yaml:"require"`
	// Retry is the alias's retry policy (docs/retries.md).
	Retry Retry `yaml:"retry"`
	// Stream configures streaming (docs/streaming.md).
	Stream Stream `yaml:"stream"`
	// Hedge configures hedging (docs/overload.md).
	Hedge Hedge `yaml:"hedge"`
	// DefaultOutputTokens is the output limit reserved for, and sent
	// upstream with, a request whose client set none (at most each
	// route's max_output_tokens). Default 0: the route's
	// max_output_tokens. `check` refuses a route whose attempt at that
	// limit costs more than the alias's max_cost_usd (docs/overload.md).
	DefaultOutputTokens int `yaml:"default_output_tokens"`
	// MayDrop lists request fields that routes of the other protocol may
	// drop (seed, metadata, service_tier, store, reasoning_effort, …:
	// those docs/translation.md marks droppable). Default none: such a
	// field keeps the request on routes of the client's own protocol. The
	// request header X-Oncegate-May-Drop adds to it.
	MayDrop []string `yaml:"may_drop"`
	// DropParams, when set, is drop_params for the alias, over the top
	// level's (docs/translation.md).
	DropParams *bool `yaml:"drop_params"`
	// AcceptUnreachableRoutes acknowledges routes whose attempt at the
	// default output limit costs more than max_cost_usd: they serve only
	// requests whose clients set a small enough limit. Default false: such
	// a route is an error.
	AcceptUnreachableRoutes bool `yaml:"accept_unreachable_routes"`
	// KeylessJoin, when set, is idempotency.keyless_join for this alias:
	// false, identical keyless requests of it never share a generation
	// (independent samples). A virtual key's keyless_join and the
	// X-Oncegate-Join header come before it (docs/identity.md). Default
	// unset: idempotency.keyless_join.
	KeylessJoin *bool `yaml:"keyless_join"`
}

// Require is an alias's admission contract for its routes.
type Require struct {
	// Input lists modalities every route must accept. Default [text].
	Input []string `yaml:"input" default:"text"`
	// BehaviorClass every route must carry. Empty (default): all routes of
	// the alias must share one class.
	BehaviorClass string `yaml:"behavior_class"`
	// MaxDataBoundary is the widest route boundary allowed. Default
	// "external".
	MaxDataBoundary string `yaml:"max_data_boundary" default:"external"`
	// Streaming: every route must stream. Default false.
	Streaming bool `yaml:"streaming"`
	// Tools: every route must support tools. Default false.
	Tools bool `yaml:"tools"`
	// JSONSchema: every route must support strict JSON schema. Default false.
	JSONSchema bool `yaml:"json_schema"`
	// Idempotency: every route must dedupe by Idempotency-Key. Default false.
	Idempotency bool `yaml:"idempotency"`
}

// Retry is an alias's retry policy.
type Retry struct {
	// MaxAttempts caps physical attempts per logical request. Default 3.
	MaxAttempts int `yaml:"max_attempts" default:"3"`
	// BaseDelay is the first retry's wait. Default 200ms.
	BaseDelay Duration `yaml:"base_delay" default:"200ms"`
	// MaxDelay caps the exponential backoff. Default 1500ms.
	MaxDelay Duration `yaml:"max_delay" default:"1500ms"`
	// RetryAfterCap caps a provider's Retry-After hint. Default 5s.
	RetryAfterCap Duration `yaml:"retry_after_cap" default:"5s"`
	// Jitter is "full" (uniform in [0, backoff]) or "none". Default "full".
	Jitter string `yaml:"jitter" default:"full"`
	// Deadline is the whole logical request's time budget. Default 60s.
	Deadline Duration `yaml:"deadline" default:"60s"`
	// MaxCostUSD caps the cost of all attempts of one request, reserved
	// worst-case before each dispatch. 0 (default): no cap.
	MaxCostUSD float64 `yaml:"max_cost_usd"`
}

// Stream configures an alias's streaming behaviour.
type Stream struct {
	// AfterOutput is what happens when a stream breaks after visible
	// output: resume, restart or stop. Default "resume".
	AfterOutput string `yaml:"after_output" default:"resume"`
	// RestartMaxTokens: restart only while fewer tokens were emitted.
	// Default 40.
	RestartMaxTokens int `yaml:"restart_max_tokens" default:"40"`
	// ResumeRoutes says which routes may continue a stream that broke
	// after output: any (the alias's routes in priority order) or same
	// (only the route that broke). Default "any".
	ResumeRoutes string `yaml:"resume_routes" default:"any"`
	// Buffer holds the whole answer until the upstream finishes. Default false.
	Buffer bool `yaml:"buffer"`
}

// Hedge configures hedging.
type Hedge struct {
	// After is how long to wait for a first byte before hedging. 0
	// (default): hedging off.
	After Duration `yaml:"after" default:"0s"`
}

// Idempotency configures the ledger (docs/identity.md).
type Idempotency struct {
	// Retention is how long terminal outcomes replay. Default 24h.
	Retention Duration `yaml:"retention" default:"24h"`
	// OnExpired is "new" or "reject" for a key past retention. Default "new".
	OnExpired string `yaml:"on_expired" default:"new"`
	// FingerprintReplayWindow: how long a keyless request replays a
	// finished twin. Default 0s (in-flight joins only).
	FingerprintReplayWindow Duration `yaml:"fingerprint_replay_window" default:"0s"`
	// SDKRetryWindow: how long a keyless official-SDK retry replays its
	// finished twin. Default 10m.
	SDKRetryWindow Duration `yaml:"sdk_retry_window" default:"10m"`
	// KeylessJoin: identical keyless requests in flight share one
	// generation. false: every keyless request is its own (independent
	// samples), as X-Oncegate-Join: off asks per request. An alias's or a
	// virtual key's own keyless_join comes before it. Default true.
	KeylessJoin bool `yaml:"keyless_join" default:"true"`
}

// Log configures logging: one line per HTTP exchange, and the gateway's
// own events, on stderr.
type Log struct {
	// Format is json or text. Default "json".
	Format string `yaml:"format" default:"json"`
	// Level is debug, info, warn or error: the least severe line written.
	// Refusals are warn, failures error. Default "info".
	Level string `yaml:"level" default:"info"`
	// Bodies: request bodies (prompts) are logged, truncated to 4 KiB.
	// Keys never are. Default false.
	Bodies bool `yaml:"bodies"`
}

// Telemetry configures OpenTelemetry traces.
type Telemetry struct {
	// OTLPEndpoint is an OTLP/HTTP collector, e.g. "http://collector:4318"
	// (traces go to its /v1/traces unless the URL names a path). Empty
	// (the default): no traces are exported.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
}

// Alerts configures the alerts the gateway sends itself.
type Alerts struct {
	// BudgetWebhook, when its url is set, receives a signed JSON event
	// each time a tenant's or a virtual key's budget (day, month, total)
	// crosses 80 % and 100 % of its ceiling (docs/operations.md).
	BudgetWebhook Webhook `yaml:"budget_webhook"`
}

// Webhook is an HTTP endpoint events are POSTed to.
type Webhook struct {
	// URL receives the events (http or https). Empty (the default): no
	// events are sent.
	URL string `yaml:"url"`
	// SecretEnv names the environment variable holding the secret each
	// event's body is signed with (HMAC-SHA256, in X-Oncegate-Signature).
	// Required with url.
	SecretEnv string `yaml:"secret_env"`
}

// Conversations configures stored conversations.
type Conversations struct {
	// MaxAmbiguous is how many tries of one turn may end without knowing
	// whether the provider answered before the gateway gives the turn up
	// with an error, leaving the conversation as it was. Default 2.
	MaxAmbiguous int `yaml:"max_ambiguous" default:"2"`
}

// RetryBudget is the fleet retry budget (docs/overload.md).
type RetryBudget struct {
	// Ratio of retries to first attempts. Default 0.1.
	Ratio float64 `yaml:"ratio" default:"0.1"`
	// MinPerSecond retries always allowed. Default 10.
	MinPerSecond float64 `yaml:"min_per_second" default:"10"`
	// Window is the rolling window. Default 10s.
	Window Duration `yaml:"window" default:"10s"`
}

// Breaker configures circuit breakers (docs/overload.md).
type Breaker struct {
	// FailureRatio opens the breaker at or above it. Default 0.5.
	FailureRatio float64 `yaml:"failure_ratio" default:"0.5"`
	// MinRequests completed in the window before it may open. Default 20.
	MinRequests int `yaml:"min_requests" default:"20"`
	// Window is the rolling window. Default 10s.
	Window Duration `yaml:"window" default:"10s"`
	// OpenFor is how long it stays open. Default 30s.
	OpenFor Duration `yaml:"open_for" default:"30s"`
	// HalfOpenProbes is how many requests a half-open breaker admits.
	// Default 3.
	HalfOpenProbes int `yaml:"half_open_probes" default:"3"`
}

// Limits bounds one request.
type Limits struct {
	// MaxBodyBytes caps a request body: a body that grows past it is
	// answered 413 request_too_large, and one whose Content-Length
	// announces more is answered 413 at once, before any of it is read.
	// Default 4194304 (4 MiB).
	MaxBodyBytes int64 `yaml:"max_body_bytes" default:"4194304"`
	// BodyReadTimeout bounds how long a request's body may take to
	// arrive, counted from the end of its headers: a body not read whole
	// within it is answered 408 request_timeout (x-should-retry: false)
	// and its connection closed, so a stalled or trickling client holds a
	// connection no longer than this. Default 30s.
	BodyReadTimeout Duration `yaml:"body_read_timeout" default:"30s"`
	// MaxResponseBytes caps an upstream response. Default 16777216 (16 MiB).
	MaxResponseBytes int64 `yaml:"max_response_bytes" default:"16777216"`
	// MaxStreamBufferBytes caps the chunks kept for joiners of one stream.
	// Default 8388608 (8 MiB).
	MaxStreamBufferBytes int64 `yaml:"max_stream_buffer_bytes" default:"8388608"`
	// MemoryBytes is the process's soft memory limit (the runtime's
	// GOMEMLIMIT, which overrides it): past it the collector works harder
	// to stay under. 0 (default): nine tenths of the cgroup's memory
	// limit when there is one, else none (docs/performance.md).
	MemoryBytes int64 `yaml:"memory_bytes"`
	// GCHeadroomBytes is how far past what is alive the collector lets
	// the heap grow before it runs (unless GOGC is set): more headroom,
	// fewer collections and less CPU; less, a smaller RSS — about this
	// much above the live heap under load, and the same spread over
	// every open stream. 0 (default): 134217728 (128 MiB)
	// (docs/performance.md).
	GCHeadroomBytes int64 `yaml:"gc_headroom_bytes"`
}

// Lease configures the owner's lease on each request in flight.
type Lease struct {
	// TTL is how long a claim lasts without renewal: a gateway that dies
	// leaves its requests in progress this long before another settles
	// them (indeterminate when an attempt was in flight). Default 30s.
	TTL Duration `yaml:"ttl" default:"30s"`
	// Renew is how often a gateway renews the claims it holds; at most
	// half the TTL, so one late renewal never loses a lease. Default 10s.
	Renew Duration `yaml:"renew" default:"10s"`
}

// Duration is a time.Duration written as "500ms", "30s" or "24h".
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

func (d *Duration) decodeScalar(tag, value string) error {
	if tag != "!!str" {
		return fmt.Errorf("want a duration such as \"500ms\" or \"30s\", found %s %q", tagName(tag), value)
	}
	v, err := time.ParseDuration(value)
	if err != nil {
		return fmt.Errorf("malformed duration %q (want e.g. \"500ms\", \"30s\", \"24h\")", value)
	}
	if v < 0 {
		return fmt.Errorf("negative duration %q", value)
	}
	*d = Duration(v)
	return nil
}

// MaxFileBytes bounds a configuration file.
const MaxFileBytes = 4 << 20

// Load reads and strictly decodes the file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, err := Parse(path, data)
	if c != nil {
		c.Store = resolveStore(c.Store, filepath.Dir(path))
	}
	return c, err
}

// resolveStore makes a relative SQLite path relative to dir, the
// configuration file's directory, so every verb that reads the file
// finds the same store wherever it is run from.
func resolveStore(store, dir string) string {
	p, ok := strings.CutPrefix(store, "sqlite://")
	if !ok || p == "" || filepath.IsAbs(p) {
		return store
	}
	return "sqlite://" + filepath.Join(dir, p)
}

// Parse strictly decodes data, naming file in errors. On failure the
// error is an Errors listing every problem; when the YAML itself was
// readable, the partially decoded Config is returned too (fields that
// failed keep their defaults) so that semantic validation can report its
// findings in the same pass.
func Parse(file string, data []byte) (*Config, error) {
	if len(data) > MaxFileBytes {
		return nil, Errors{{File: file, Msg: fmt.Sprintf("file is %d bytes; the limit is %d", len(data), MaxFileBytes)}}
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, Errors{{File: file, Msg: "the file is empty"}}
		}
		return nil, Errors{syntaxError(file, err, data)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, Errors{{File: file, Pos: Pos{extra.Line, extra.Column}, Msg: "more than one YAML document; put everything in one"}}
	}
	cfg := &Config{file: file}
	setDefaults(reflect.ValueOf(cfg).Elem())
	d := &decoder{file: file, present: map[string]Pos{}}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, Errors{{File: file, Msg: "the file is empty"}}
		}
		root = root.Content[0]
	}
	d.decode(root, reflect.ValueOf(cfg).Elem(), "")
	cfg.present = d.present
	for i := range cfg.Routes {
		if cfg.Routes[i].Release == "" {
			cfg.Routes[i].Release = cfg.Routes[i].Model
		}
	}
	d.errs = append(d.errs, cfg.secretSourceErrors()...)
	if len(d.errs) > 0 {
		return cfg, d.errs
	}
	return cfg, nil
}

// File is the path the configuration was read from.
func (c *Config) File() string { return c.file }

// Has reports whether path (e.g. "routes[0].price") was written in the file.
func (c *Config) Has(path string) bool {
	_, ok := c.present[path]
	return ok
}

// Pos returns where path was written, or where its nearest written
// ancestor was, so that a violation about a defaulted field still points
// somewhere useful.
func (c *Config) Pos(path string) Pos {
	for path != "" {
		if p, ok := c.present[path]; ok {
			return p
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return Pos{}
}

// ErrorAt builds an Error about path in c's file.
func (c *Config) ErrorAt(path, format string, args ...any) *Error {
	return &Error{File: c.file, Pos: c.Pos(path), Path: path, Msg: fmt.Sprintf(format, args...)}
}
