// Package gateway is oncegate's HTTP surface and request flow (DESIGN §4,
// §5): the only package that knows the whole path of a logical request —
// authentication, identity, the retry engine driving every attempt, the
// streaming boundary, receipts. The parts it wires together (policy,
// retry, provider, upstream, receipt) know nothing of each other.
package gateway

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/receipt"
	"github.com/oncegate/oncegate/internal/upstream"
)

// Options configure a Gateway. Zero values take the defaults named.
type Options struct {
	// Clock tells time (default: the system clock).
	Clock clock.Clock
	// Logger receives one line per logical request (default: discard).
	Logger *slog.Logger
	// Receipts stores receipts (default: in memory, the last 100,000).
	Receipts ReceiptStore
	// DrainTimeout bounds graceful shutdown (default 30s).
	DrainTimeout time.Duration
}

// Gateway serves the API. It is safe for concurrent use.
type Gateway struct {
	pol      *policy.Policy
	keys     []tenantKey
	clients  map[string]*upstream.Client
	receipts ReceiptStore
	clock    clock.Clock
	log      *slog.Logger
	drain    time.Duration
	mux      *http.ServeMux
	inflight sync.WaitGroup
}

type tenantKey struct {
	key    []byte
	tenant *policy.Tenant
}

// New builds a gateway for a compiled policy and its resolved secrets.
func New(pol *policy.Policy, secrets *config.Secrets, opts Options) (*Gateway, error) {
	g := &Gateway{pol: pol, clients: map[string]*upstream.Client{}, receipts: opts.Receipts,
		clock: opts.Clock, log: opts.Logger, drain: opts.DrainTimeout}
	if g.clock == nil {
		g.clock = clock.System{}
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.receipts == nil {
		g.receipts = NewMemoryReceipts(100_000)
	}
	if g.drain == 0 {
		g.drain = 30 * time.Second
	}
	for key, id := range secrets.TenantKeys {
		t := pol.Tenant(id)
		if t == nil {
			return nil, fmt.Errorf("secrets name unknown tenant %q", id)
		}
		g.keys = append(g.keys, tenantKey{key: []byte(key), tenant: t})
	}
	for _, p := range pol.Providers {
		h := http.Header{}
		h.Set("User-Agent", "oncegate/1")
		key := secrets.ProviderKeys[p.ID]
		switch p.Type {
		case policy.TypeAnthropic:
			h.Set("anthropic-version", provider.AnthropicVersion)
			if key != "" {
				h.Set("x-api-key", key)
			}
		default:
			if key != "" {
				h.Set("Authorization", "Bearer "+key)
			}
		}
		g.clients[p.ID] = upstream.New(upstream.Config{BaseURL: p.BaseURL, Connect: p.Connect, FirstByte: p.FirstByte, Idle: p.Idle, Headers: h})
	}
	g.routes()
	return g, nil
}

func (g *Gateway) routes() {
	m := http.NewServeMux()
	m.HandleFunc("POST /v1/chat/completions", g.serveChat(provider.OpenAI))
	m.HandleFunc("POST /v1/messages", g.serveChat(provider.Anthropic))
	m.HandleFunc("GET /v1/models", g.authed(g.serveModels))
	m.HandleFunc("GET /v1/receipts/{id}", g.authed(g.serveReceipt))
	m.HandleFunc("GET /v1/receipts", g.authed(g.serveReceipts))
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	m.HandleFunc("GET /readyz", g.serveReady)
	g.mux = m
}

// ServeHTTP serves the gateway's API.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.mux.ServeHTTP(w, r) }

// Close releases upstream connections.
func (g *Gateway) Close() {
	for _, c := range g.clients {
		c.Close()
	}
}

// Serve runs the gateway on ln until ctx ends, then drains: it stops
// accepting, lets in-flight requests and streams finish for up to the
// drain timeout, then cuts the rest.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	dctx, cancel := context.WithTimeout(context.Background(), g.drain)
	defer cancel()
	err := srv.Shutdown(dctx)
	if errors.Is(err, context.DeadlineExceeded) {
		g.log.Warn("drain timeout: closing remaining connections", "timeout", g.drain)
		_ = srv.Close()
	}
	g.inflight.Wait()
	return nil
}

// tenant authenticates a request: "Authorization: Bearer KEY" (OpenAI SDK)
// or "x-api-key: KEY" (Anthropic SDK). Keys compare in constant time.
func (g *Gateway) tenant(r *http.Request) *policy.Tenant {
	key := r.Header.Get("x-api-key")
	if a := r.Header.Get("Authorization"); key == "" && len(a) > 7 && strings.EqualFold(a[:7], "Bearer ") {
		key = strings.TrimSpace(a[7:])
	}
	if key == "" {
		return nil
	}
	var found *policy.Tenant
	for _, k := range g.keys {
		if subtle.ConstantTimeCompare(k.key, []byte(key)) == 1 {
			found = k.tenant
		}
	}
	return found
}

// protocolOf picks the error shape for endpoints shared by both SDKs.
func protocolOf(r *http.Request) provider.Protocol {
	if r.Header.Get("anthropic-version") != "" || r.Header.Get("x-api-key") != "" {
		return provider.Anthropic
	}
	return provider.OpenAI
}

func (g *Gateway) authed(h func(http.ResponseWriter, *http.Request, *policy.Tenant)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t := g.tenant(r)
		if t == nil {
			errorf(CodeUnauthorized, "missing or unknown API key").write(w, protocolOf(r), meta{})
			return
		}
		h(w, r, t)
	}
}

// serveModels lists the aliases the tenant may use: those with at least
// one route inside the tenant's data boundary.
func (g *Gateway) serveModels(w http.ResponseWriter, r *http.Request, t *policy.Tenant) {
	type model struct {
		ID          string `json:"id"`
		Object      string `json:"object,omitempty"`
		Type        string `json:"type,omitempty"`
		Created     int64  `json:"created,omitempty"`
		OwnedBy     string `json:"owned_by,omitempty"`
		DisplayName string `json:"display_name,omitempty"`
		CreatedAt   string `json:"created_at,omitempty"`
	}
	anthropic := protocolOf(r) == provider.Anthropic
	data := []model{}
	for _, a := range g.pol.Aliases {
		if len(a.Ineligible(policy.Needs{}, t.MaxBoundary)) == len(a.Routes) {
			continue
		}
		if anthropic {
			data = append(data, model{ID: a.Name, Type: "model", DisplayName: a.Name, CreatedAt: "2026-01-01T00:00:00Z"})
		} else {
			data = append(data, model{ID: a.Name, Object: "model", Created: 1767225600, OwnedBy: "oncegate"})
		}
	}
	var body any = map[string]any{"object": "list", "data": data}
	if anthropic {
		first, last := "", ""
		if len(data) > 0 {
			first, last = data[0].ID, data[len(data)-1].ID
		}
		body = map[string]any{"data": data, "has_more": false, "first_id": first, "last_id": last}
	}
	writeJSON(w, http.StatusOK, body)
}

func (g *Gateway) serveReceipt(w http.ResponseWriter, r *http.Request, t *policy.Tenant) {
	rc, err := g.receipts.Get(t.ID, r.PathValue("id"))
	if err != nil {
		errorf(CodeModelNotFound, "no receipt %q", r.PathValue("id")).write(w, protocolOf(r), meta{})
		return
	}
	body, err := sealed(rc)
	if err != nil {
		errorf(CodeInternal, "encode receipt").write(w, protocolOf(r), meta{})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

func (g *Gateway) serveReceipts(w http.ResponseWriter, r *http.Request, t *policy.Tenant) {
	limit := 20
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			errorf(CodeInvalidRequest, "limit must be an integer in [1, 1000]").write(w, protocolOf(r), meta{})
			return
		}
		limit = n
	}
	list, err := g.receipts.List(t.ID, limit, r.URL.Query().Get("after"))
	if err != nil {
		errorf(CodeInternal, "list receipts").write(w, protocolOf(r), meta{})
		return
	}
	last := ""
	if len(list) > 0 {
		last = list[len(list)-1].RequestID
	}
	for _, r := range list {
		if err := r.Seal(); err != nil {
			errorf(CodeInternal, "seal receipt").write(w, provider.OpenAI, meta{})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": list, "has_more": len(list) == limit, "last_id": last})
}

func (g *Gateway) serveReady(w http.ResponseWriter, _ *http.Request) {
	if _, err := g.receipts.List("", 1, ""); err != nil {
		http.Error(w, "store unavailable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// sealed computes a receipt's digests and returns its canonical JSON.
func sealed(r *receipt.Receipt) ([]byte, error) {
	if err := r.Seal(); err != nil {
		return nil, err
	}
	return r.Canonical()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
