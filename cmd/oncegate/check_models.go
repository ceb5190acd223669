package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/upstream"
)

// lookupTimeout bounds one model lookup of `check --connect`.
const lookupTimeout = 5 * time.Second

// probeRouteModels asks each route's provider, where it can be asked,
// whether the route's model or deployment exists (provider.ModelLookup,
// docs/providers.md), one question per provider and model, with the
// provider's credential, headers and query as serve sends them. A model
// the provider says it does not have, or a credential it refuses, fails
// the check (false); a provider that cannot be asked, or that does not
// answer, is noted and fails nothing — the route fails over at its first
// request then (route_unavailable). ready holds the endpoints whose
// credential was obtained; the others' routes are not asked.
func probeRouteModels(ctx context.Context, p *policy.Policy, secrets *config.Secrets, ready map[string]provider.Endpoint, stdout, stderr io.Writer) bool {
	ok := true
	clients := map[string]*upstream.Client{}
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	asked := map[[2]string]bool{}
	for _, r := range p.Routes {
		ep := ready[r.Provider.ID]
		if ep == nil || asked[[2]string{r.Provider.ID, r.Model}] {
			continue
		}
		asked[[2]string{r.Provider.ID, r.Model}] = true
		line := fmt.Sprintf("route %s (%s %q on %s)", r.ID, r.Provider.Type, r.Model, r.Provider.ID)
		l, can := ep.(provider.ModelLookup)
		if !can {
			fmt.Fprintf(stdout, "%s: not asked: provider type %s has no model lookup\n", line, r.Provider.Type)
			continue
		}
		out, why := l.LookupModel(r.Model)
		if out == nil {
			fmt.Fprintf(stdout, "%s: not asked: %s\n", line, why)
			continue
		}
		c := clients[r.Provider.ID]
		if c == nil {
			c = lookupClient(r.Provider, ep, secrets)
			clients[r.Provider.ID] = c
		}
		found, msg := askModel(ctx, c, ep, out, r.Model)
		switch found {
		case modelFound:
			fmt.Fprintf(stdout, "%s: %s\n", line, msg)
		case modelUnknown:
			fmt.Fprintf(stdout, "%s: could not tell: %s\n", line, msg)
		default:
			fmt.Fprintf(stderr, "%s: %s\n", line, msg)
			ok = false
		}
	}
	return ok
}

// lookupClient is a provider's client as serve makes it: its base URL,
// credential, extra headers and query, with the provider's timeouts.
func lookupClient(pr *policy.Provider, ep provider.Endpoint, secrets *config.Secrets) *upstream.Client {
	h := http.Header{}
	h.Set("User-Agent", "oncegate/1 (check)")
	for name, v := range secrets.ProviderHeaders[pr.ID] {
		h.Set(name, v)
	}
	var q url.Values
	for name, v := range secrets.ProviderQuery[pr.ID] {
		if q == nil {
			q = url.Values{}
		}
		q.Set(name, v)
	}
	cfg := upstream.Config{BaseURL: ep.BaseURL(), Connect: pr.Connect, FirstByte: pr.FirstByte, Idle: pr.Idle, Headers: h, Query: q}
	if a := ep.Auth(); a != nil {
		cfg.Auth = a
	}
	return upstream.New(cfg)
}

// What a model lookup found.
const (
	modelFound   = iota // the provider has it
	modelMissing        // the provider says it does not exist, or refused the credential
	modelUnknown        // no answer that says either
)

// askModel sends one lookup and reads its answer as an attempt's: a 2xx
// is found; Fault classifies the rest. A 404 without an error code of the
// provider's (the path's, not the model's) asks for the list instead,
// where the provider has one (provider.ModelLister).
func askModel(ctx context.Context, c *upstream.Client, ep provider.Endpoint, out *provider.Outbound, model string) (int, string) {
	status, h, body, err := get(ctx, c, out)
	if err != nil {
		return modelUnknown, err.Error()
	}
	if status/100 == 2 {
		return modelFound, fmt.Sprintf("%q exists at the provider", model)
	}
	ue, k, _ := ep.Fault(status, h, body)
	if lister, ok := ep.(provider.ModelLister); ok && status == http.StatusNotFound && ue.Code == "" {
		status, _, body, err = get(ctx, c, lister.ListModels())
		switch {
		case err != nil:
			return modelUnknown, err.Error()
		case status/100 != 2:
			return modelUnknown, fmt.Sprintf("neither the model nor the list of models could be read (HTTP %d)", status)
		case lister.Listed(body, model):
			return modelFound, fmt.Sprintf("%q is in the provider's list of models", model)
		}
		return modelMissing, fmt.Sprintf("%q is not in the provider's list of models: the route cannot serve (it fails over at once, route_unavailable)", model)
	}
	switch k {
	case gw.KindRouteUnavailable:
		return modelMissing, fmt.Sprintf("the provider does not have %q (HTTP %d %s): the route cannot serve (it fails over at once, route_unavailable)",
			model, status, firstOf(ue.Code, ue.Type))
	case gw.KindAccountRefused:
		return modelMissing, fmt.Sprintf("the provider refused the gateway's credential (HTTP %d)", status)
	}
	return modelUnknown, fmt.Sprintf("the provider answered HTTP %d %s", status, firstOf(ue.Code, ue.Type))
}

// get sends one lookup and reads a bounded answer.
func get(ctx context.Context, c *upstream.Client, out *provider.Outbound) (int, http.Header, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	resp, err := c.Do(ctx, &upstream.Request{Method: out.Method, Path: out.Path, Header: out.Header})
	if err != nil {
		// Only the phase: the transport's error names the URL, whose
		// query may hold a secret.
		var ue *upstream.Error
		if errors.As(err, &ue) && ue.Timeout {
			return 0, nil, nil, fmt.Errorf("no answer (timed out in the %s phase)", ue.Phase)
		}
		if errors.As(err, &ue) {
			return 0, nil, nil, fmt.Errorf("no answer (failed in the %s phase)", ue.Phase)
		}
		return 0, nil, nil, errors.New("no answer")
	}
	defer resp.Body.Close()
	body, err := upstream.ReadAll(resp.Body, 1<<20)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("answer unreadable: %w", err)
	}
	return resp.Status, resp.Header, body, nil
}

func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
