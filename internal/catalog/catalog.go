// Package catalog is the model catalogue shipped with the binary
// (docs/routing.md): for the common models of every provider type, the
// price per million tokens (input, output, cached input, cache write),
// the context window and the output limit, from the providers' public
// price lists as of Compiled. A route whose model is in the catalogue may
// omit its price and those capabilities; what a route states overrides
// the catalogue.
package catalog

import (
	"slices"
	"strings"
)

// Compiled is the day the catalogue's figures were taken from the
// providers' public price lists.
const Compiled = "2026-12-02"

// Model is one model's published figures. Prices are USD per million
// tokens; a cache price of 0 means the provider has no such price (the
// input price applies).
type Model struct {
	// Name is the model's name at its maker; IDs are the other names
	// providers serve it under (Bedrock model ids, Vertex's versioned
	// names, dated snapshots).
	Name   string
	IDs    []string
	Family string // openai, anthropic, google, amazon, meta, mistral
	Input  float64
	Output float64
	// CachedInput is the price of prompt tokens read from the provider's
	// cache; CacheWrite of those written to it (Anthropic's 5-minute
	// cache).
	CachedInput float64
	CacheWrite  float64
	// Context is the context window and MaxOutput the most one
	// generation may write, in tokens.
	Context   int64
	MaxOutput int64
}

// models are the catalogue's entries. Anthropic's models are priced the
// same on Bedrock and Vertex as at Anthropic, so one entry carries all of
// their names.
var models = []Model{
	// OpenAI (platform.openai.com/pricing); Azure OpenAI's global
	// deployments are priced the same.
	{Name: "gpt-5", IDs: []string{"gpt-5-2025-08-07"}, Family: "openai", Input: 1.25, Output: 10, CachedInput: 0.125, Context: 400000, MaxOutput: 128000},
	{Name: "gpt-5-mini", IDs: []string{"gpt-5-mini-2025-08-07"}, Family: "openai", Input: 0.25, Output: 2, CachedInput: 0.025, Context: 400000, MaxOutput: 128000},
	{Name: "gpt-5-nano", IDs: []string{"gpt-5-nano-2025-08-07"}, Family: "openai", Input: 0.05, Output: 0.4, CachedInput: 0.005, Context: 400000, MaxOutput: 128000},
	{Name: "gpt-4.1", IDs: []string{"gpt-4.1-2025-04-14"}, Family: "openai", Input: 2, Output: 8, CachedInput: 0.5, Context: 1047576, MaxOutput: 32768},
	{Name: "gpt-4.1-mini", IDs: []string{"gpt-4.1-mini-2025-04-14"}, Family: "openai", Input: 0.4, Output: 1.6, CachedInput: 0.1, Context: 1047576, MaxOutput: 32768},
	{Name: "gpt-4.1-nano", IDs: []string{"gpt-4.1-nano-2025-04-14"}, Family: "openai", Input: 0.1, Output: 0.4, CachedInput: 0.025, Context: 1047576, MaxOutput: 32768},
	{Name: "gpt-4o", IDs: []string{"gpt-4o-2024-11-20", "gpt-4o-2024-08-06"}, Family: "openai", Input: 2.5, Output: 10, CachedInput: 1.25, Context: 128000, MaxOutput: 16384},
	{Name: "gpt-4o-mini", IDs: []string{"gpt-4o-mini-2024-07-18"}, Family: "openai", Input: 0.15, Output: 0.6, CachedInput: 0.075, Context: 128000, MaxOutput: 16384},
	{Name: "o3", IDs: []string{"o3-2025-04-16"}, Family: "openai", Input: 2, Output: 8, CachedInput: 0.5, Context: 200000, MaxOutput: 100000},
	{Name: "o4-mini", IDs: []string{"o4-mini-2025-04-16"}, Family: "openai", Input: 1.1, Output: 4.4, CachedInput: 0.275, Context: 200000, MaxOutput: 100000},
	{Name: "o3-mini", IDs: []string{"o3-mini-2025-01-31"}, Family: "openai", Input: 1.1, Output: 4.4, CachedInput: 0.55, Context: 200000, MaxOutput: 100000},
	{Name: "text-embedding-3-small", Family: "openai", Input: 0.02, Context: 8191, MaxOutput: 1},
	{Name: "text-embedding-3-large", Family: "openai", Input: 0.13, Context: 8191, MaxOutput: 1},

	// Anthropic (anthropic.com/pricing), also on Bedrock and Vertex AI.
	{Name: "claude-opus-4-5", IDs: []string{"claude-opus-4-5-20251101", "anthropic.claude-opus-4-5-20251101-v1:0", "claude-opus-4-5@20251101"},
		Family: "anthropic", Input: 5, Output: 25, CachedInput: 0.5, CacheWrite: 6.25, Context: 200000, MaxOutput: 64000},
	{Name: "claude-opus-4-1", IDs: []string{"claude-opus-4-1-20250805", "anthropic.claude-opus-4-1-20250805-v1:0", "claude-opus-4-1@20250805"},
		Family: "anthropic", Input: 15, Output: 75, CachedInput: 1.5, CacheWrite: 18.75, Context: 200000, MaxOutput: 32000},
	{Name: "claude-opus-4", IDs: []string{"claude-opus-4-20250514", "anthropic.claude-opus-4-20250514-v1:0", "claude-opus-4@20250514"},
		Family: "anthropic", Input: 15, Output: 75, CachedInput: 1.5, CacheWrite: 18.75, Context: 200000, MaxOutput: 32000},
	{Name: "claude-sonnet-4-5", IDs: []string{"claude-sonnet-4-5-20250929", "anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5@20250929"},
		Family: "anthropic", Input: 3, Output: 15, CachedInput: 0.3, CacheWrite: 3.75, Context: 200000, MaxOutput: 64000},
	{Name: "claude-sonnet-4", IDs: []string{"claude-sonnet-4-20250514", "anthropic.claude-sonnet-4-20250514-v1:0", "claude-sonnet-4@20250514"},
		Family: "anthropic", Input: 3, Output: 15, CachedInput: 0.3, CacheWrite: 3.75, Context: 200000, MaxOutput: 64000},
	{Name: "claude-3-7-sonnet", IDs: []string{"claude-3-7-sonnet-20250219", "claude-3-7-sonnet-latest", "anthropic.claude-3-7-sonnet-20250219-v1:0", "claude-3-7-sonnet@20250219"},
		Family: "anthropic", Input: 3, Output: 15, CachedInput: 0.3, CacheWrite: 3.75, Context: 200000, MaxOutput: 64000},
	{Name: "claude-haiku-4-5", IDs: []string{"claude-haiku-4-5-20251001", "anthropic.claude-haiku-4-5-20251001-v1:0", "claude-haiku-4-5@20251001"},
		Family: "anthropic", Input: 1, Output: 5, CachedInput: 0.1, CacheWrite: 1.25, Context: 200000, MaxOutput: 64000},
	{Name: "claude-3-5-haiku", IDs: []string{"claude-3-5-haiku-20241022", "claude-3-5-haiku-latest", "anthropic.claude-3-5-haiku-20241022-v1:0", "claude-3-5-haiku@20241022"},
		Family: "anthropic", Input: 0.8, Output: 4, CachedInput: 0.08, CacheWrite: 1, Context: 200000, MaxOutput: 8192},
	{Name: "claude-3-haiku", IDs: []string{"claude-3-haiku-20240307", "anthropic.claude-3-haiku-20240307-v1:0", "claude-3-haiku@20240307"},
		Family: "anthropic", Input: 0.25, Output: 1.25, CachedInput: 0.03, CacheWrite: 0.3, Context: 200000, MaxOutput: 4096},

	// Google (ai.google.dev/pricing; Vertex AI's list prices are the
	// same), for prompts up to 200k tokens.
	{Name: "gemini-2.5-pro", Family: "google", Input: 1.25, Output: 10, CachedInput: 0.125, Context: 1048576, MaxOutput: 65536},
	{Name: "gemini-2.5-flash", Family: "google", Input: 0.3, Output: 2.5, CachedInput: 0.03, Context: 1048576, MaxOutput: 65536},
	{Name: "gemini-2.5-flash-lite", Family: "google", Input: 0.1, Output: 0.4, CachedInput: 0.01, Context: 1048576, MaxOutput: 65536},
	{Name: "gemini-2.0-flash", IDs: []string{"gemini-2.0-flash-001"}, Family: "google", Input: 0.1, Output: 0.4, CachedInput: 0.025, Context: 1048576, MaxOutput: 8192},
	{Name: "gemini-2.0-flash-lite", IDs: []string{"gemini-2.0-flash-lite-001"}, Family: "google", Input: 0.075, Output: 0.3, Context: 1048576, MaxOutput: 8192},

	// Amazon and Meta on Bedrock (aws.amazon.com/bedrock/pricing,
	// on-demand, us-east-1).
	{Name: "amazon.nova-pro-v1:0", Family: "amazon", Input: 0.8, Output: 3.2, CachedInput: 0.2, Context: 300000, MaxOutput: 10000},
	{Name: "amazon.nova-lite-v1:0", Family: "amazon", Input: 0.06, Output: 0.24, CachedInput: 0.015, Context: 300000, MaxOutput: 10000},
	{Name: "amazon.nova-micro-v1:0", Family: "amazon", Input: 0.035, Output: 0.14, CachedInput: 0.00875, Context: 128000, MaxOutput: 10000},
	{Name: "meta.llama3-3-70b-instruct-v1:0", Family: "meta", Input: 0.72, Output: 0.72, Context: 128000, MaxOutput: 8192},
	{Name: "mistral.mistral-large-2407-v1:0", Family: "mistral", Input: 2, Output: 6, Context: 128000, MaxOutput: 8192},
}

// byID indexes every name of every model.
var byID = func() map[string]*Model {
	m := map[string]*Model{}
	for i := range models {
		e := &models[i]
		m[e.Name] = e
		for _, id := range e.IDs {
			m[id] = e
		}
	}
	return m
}()

// Lookup finds the model a route's `model` names: its name or one of its
// ids, as a provider takes it — a Bedrock inference profile's region
// prefix ("us.", "eu.", "apac.", "global.") and ARN, and Gemini's
// "models/" prefix, set aside.
func Lookup(model string) (Model, bool) {
	id := model
	if strings.HasPrefix(id, "arn:") {
		id = id[strings.LastIndex(id, "/")+1:]
	}
	id = strings.TrimPrefix(id, "models/")
	if e, ok := byID[id]; ok {
		return *e, true
	}
	for _, region := range []string{"us.", "eu.", "apac.", "global.", "us-gov.", "jp.", "au."} {
		if rest, ok := strings.CutPrefix(id, region); ok {
			if e, ok := byID[rest]; ok {
				return *e, true
			}
		}
	}
	return Model{}, false
}

// All lists the catalogue's models, by family then name.
func All() []Model {
	out := slices.Clone(models)
	slices.SortStableFunc(out, func(a, b Model) int {
		if c := strings.Compare(a.Family, b.Family); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}
