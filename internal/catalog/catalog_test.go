package catalog

import "testing"

// A model is found by every name a provider serves it under: its own, a
// dated snapshot, a Bedrock model id, inference profile or ARN, a Vertex
// versioned name, Gemini's "models/" form.
func TestLookupFindsAModelByEveryName(t *testing.T) {
	for name, want := range map[string]string{
		"gpt-4o-mini":                                  "gpt-4o-mini",
		"gpt-4o-mini-2024-07-18":                       "gpt-4o-mini",
		"claude-sonnet-4-5-20250929":                   "claude-sonnet-4-5",
		"anthropic.claude-sonnet-4-5-20250929-v1:0":    "claude-sonnet-4-5",
		"us.anthropic.claude-sonnet-4-5-20250929-v1:0": "claude-sonnet-4-5",
		"arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-3-5-haiku-20241022-v1:0": "claude-3-5-haiku",
		"arn:aws:bedrock:eu-west-1:123456789012:inference-profile/eu.amazon.nova-pro-v1:0":     "amazon.nova-pro-v1:0",
		"claude-sonnet-4-5@20250929": "claude-sonnet-4-5",
		"models/gemini-2.5-flash":    "gemini-2.5-flash",
	} {
		m, ok := Lookup(name)
		if !ok || m.Name != want {
			t.Errorf("Lookup(%q) = %q, %v; want %q", name, m.Name, ok, want)
		}
	}
	for _, name := range []string{"", "m", "gpt-4o-mini-typo", "us.", "arn:aws:bedrock:x"} {
		if m, ok := Lookup(name); ok {
			t.Errorf("Lookup(%q) found %q", name, m.Name)
		}
	}
}

// Every entry is whole: a name no other entry uses, a family, a positive
// input price, cache prices below the output price, an output limit
// within the context window.
func TestEveryEntryIsWhole(t *testing.T) {
	seen := map[string]string{}
	for _, m := range All() {
		for _, id := range append([]string{m.Name}, m.IDs...) {
			if prev, dup := seen[id]; dup {
				t.Errorf("%q names both %s and %s", id, prev, m.Name)
			}
			seen[id] = m.Name
		}
		if m.Family == "" || m.Input <= 0 || m.Output < 0 || m.CachedInput >= m.Input && m.CachedInput != 0 ||
			m.Context <= 0 || m.MaxOutput <= 0 || m.MaxOutput > m.Context {
			t.Errorf("entry %+v", m)
		}
	}
}
