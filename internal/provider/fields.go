package provider

import (
	"bytes"
	"encoding/json"
	"slices"
	"sort"
	"strconv"
)

// Fate is what a top-level request field becomes on a route that speaks
// the other protocol. On a route of the client's own protocol every field
// reaches the provider as the client sent it (the gateway rewrites only
// the model, streaming and the output limit). docs/translation.md is the
// table for people; Fields is the same table for the code, and a test
// holds the two equal.
type Fate string

// The fates.
const (
	// FateGateway: the gateway sets it for every route (model, streaming).
	FateGateway Fate = "gateway"
	// FateTranslated: carried to the other protocol's equivalent.
	FateTranslated Fate = "translated"
	// FateNativeOnly: it has no faithful equivalent, so routes of the other
	// protocol are ineligible for the request — skipped, with the reason
	// in the receipt and in the error if no route is left.
	FateNativeOnly Fate = "native_only"
	// FateRejected: refused with 400 naming the field, on every route.
	FateRejected Fate = "rejected"
)

// Field is one top-level request field of a protocol and its fate.
type Field struct {
	Protocol Protocol
	Name     string
	// Fate is what a value that asks for something becomes. A value that
	// asks for nothing (null, and what Neutral accepts) is translated
	// whatever Fate says: logprobs false, parallel_tool_calls true.
	Fate Fate
	// Neutral reports whether a value asks for nothing the other protocol
	// could lack; nil: only null does.
	Neutral func(json.RawMessage) bool
	// To is the field, in the other protocol, that a translated value
	// becomes ("" for gateway fields and for those with no equivalent).
	To string
	// Sample is a value that asks for something, and Plain one that does
	// not (when the field has such values): the test of the table sends
	// both.
	Sample, Plain string
	// Note says what happens, for the docs.
	Note string
	// Droppable: a native-only field that the translation simply does
	// not carry (it asks for a provider-side extra, not for a different
	// answer), so a route of the other protocol may serve the request
	// without it — if the alias (may_drop) or the request
	// (X-Oncegate-May-Drop) allows it (docs/translation.md).
	Droppable bool
}

func isValue(want ...string) func(json.RawMessage) bool {
	return func(raw json.RawMessage) bool {
		raw = bytes.TrimSpace(raw)
		for _, w := range want {
			if string(raw) == w {
				return true
			}
		}
		return false
	}
}

// hasType reports whether raw is an object whose "type" is one of types.
func hasType(types ...string) func(json.RawMessage) bool {
	return func(raw json.RawMessage) bool {
		var v struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(raw, &v) != nil {
			return false
		}
		for _, t := range types {
			if v.Type == t {
				return true
			}
		}
		return false
	}
}

// atMost reports whether raw is a number no greater than limit.
func atMost(limit float64) func(json.RawMessage) bool {
	return func(raw json.RawMessage) bool {
		f, err := strconv.ParseFloat(string(bytes.TrimSpace(raw)), 64)
		return err == nil && f <= limit
	}
}

// emptyObject reports whether raw is {}.
func emptyObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && len(m) == 0
}

// Fields is every top-level request field oncegate knows, per protocol.
// A field it does not know is native only: a route of the client's own
// protocol may understand it (an extension of an OpenAI-compatible
// server), a translation would lose it.
var Fields = []Field{
	// OpenAI Chat Completions.
	{Protocol: OpenAI, Name: "model", Fate: FateGateway, Note: "the route's model"},
	{Protocol: OpenAI, Name: "stream", Fate: FateGateway, Note: "the gateway streams upstream when the client streams"},
	{Protocol: OpenAI, Name: "stream_options", Fate: FateGateway, Note: "usage is always asked upstream; the client gets the usage chunk if it asked"},
	{Protocol: OpenAI, Name: "messages", Fate: FateTranslated, To: "system, messages", Note: "system and developer messages become the system prompt; tool results become tool_result blocks"},
	{Protocol: OpenAI, Name: "max_tokens", Fate: FateTranslated, To: "max_tokens", Sample: "50", Note: "at most the route's max_output_tokens"},
	{Protocol: OpenAI, Name: "max_completion_tokens", Fate: FateTranslated, To: "max_tokens", Sample: "50", Note: "at most the route's max_output_tokens"},
	{Protocol: OpenAI, Name: "temperature", Fate: FateNativeOnly, Neutral: atMost(1), To: "temperature", Sample: "1.5", Plain: "0.7", Note: "0–1 is carried; above 1 (Anthropic's maximum) only OpenAI routes serve"},
	{Protocol: OpenAI, Name: "top_p", Fate: FateTranslated, To: "top_p", Sample: "0.9"},
	{Protocol: OpenAI, Name: "stop", Fate: FateTranslated, To: "stop_sequences", Sample: `["END"]`},
	{Protocol: OpenAI, Name: "tools", Fate: FateTranslated, To: "tools", Note: "function tools; parameters become input_schema"},
	{Protocol: OpenAI, Name: "tool_choice", Fate: FateTranslated, To: "tool_choice", Sample: `"required"`, Note: "auto, none, required (any), a named function (tool)"},
	{Protocol: OpenAI, Name: "parallel_tool_calls", Fate: FateTranslated, Neutral: isValue("true"), To: "tool_choice.disable_parallel_tool_use", Sample: "false", Plain: "true", Note: "false becomes disable_parallel_tool_use: true (with tools)"},
	{Protocol: OpenAI, Name: "user", Fate: FateTranslated, To: "metadata.user_id", Sample: `"u-1"`},
	{Protocol: OpenAI, Name: "safety_identifier", Fate: FateTranslated, To: "metadata.user_id", Sample: `"u-1"`, Note: "preferred over user when both are sent"},
	{Protocol: OpenAI, Name: "n", Fate: FateNativeOnly, Droppable: true, Neutral: isValue("1"), Sample: "2", Plain: "1", Note: "1 to 8 choices, each relayed and billed: as sent on OpenAI routes, as candidateCount on Gemini and Vertex Gemini routes (docs/providers.md); Anthropic answers one (dropped: one choice)"},
	{Protocol: OpenAI, Name: "response_format", Fate: FateNativeOnly, Neutral: hasType("text"), Sample: `{"type":"json_object"}`, Plain: `{"type":"text"}`, Note: "json_object and json_schema have no Anthropic equivalent; json_schema also needs a route with json_schema capability"},
	{Protocol: OpenAI, Name: "seed", Fate: FateNativeOnly, Droppable: true, Sample: "7", Note: "Anthropic has no seed"},
	{Protocol: OpenAI, Name: "logprobs", Fate: FateNativeOnly, Neutral: isValue("false"), Sample: "true", Plain: "false", Note: "Anthropic returns no log probabilities"},
	{Protocol: OpenAI, Name: "top_logprobs", Fate: FateNativeOnly, Neutral: isValue("0"), Sample: "3", Plain: "0"},
	{Protocol: OpenAI, Name: "reasoning_effort", Fate: FateNativeOnly, Droppable: true, Sample: `"high"`, Note: "Anthropic's thinking is not the same knob"},
	{Protocol: OpenAI, Name: "metadata", Fate: FateNativeOnly, Droppable: true, Neutral: emptyObject, Sample: `{"team":"a"}`, Plain: "{}", Note: "Anthropic's metadata holds only user_id"},
	{Protocol: OpenAI, Name: "store", Fate: FateNativeOnly, Droppable: true, Neutral: isValue("false"), Sample: "true", Plain: "false", Note: "a stored completion exists only at OpenAI"},
	{Protocol: OpenAI, Name: "frequency_penalty", Fate: FateNativeOnly, Droppable: true, Neutral: isValue("0", "0.0"), Sample: "0.5", Plain: "0"},
	{Protocol: OpenAI, Name: "presence_penalty", Fate: FateNativeOnly, Droppable: true, Neutral: isValue("0", "0.0"), Sample: "0.5", Plain: "0"},
	{Protocol: OpenAI, Name: "logit_bias", Fate: FateNativeOnly, Droppable: true, Neutral: emptyObject, Sample: `{"50256":-100}`, Plain: "{}"},
	{Protocol: OpenAI, Name: "modalities", Fate: FateNativeOnly, Neutral: isValue(`["text"]`), Sample: `["text","audio"]`, Plain: `["text"]`},
	{Protocol: OpenAI, Name: "audio", Fate: FateNativeOnly, Sample: `{"voice":"alloy","format":"mp3"}`},
	{Protocol: OpenAI, Name: "prediction", Fate: FateNativeOnly, Sample: `{"type":"content","content":"x"}`},
	{Protocol: OpenAI, Name: "service_tier", Fate: FateNativeOnly, Droppable: true, Neutral: isValue(`"auto"`), Sample: `"flex"`, Plain: `"auto"`},
	{Protocol: OpenAI, Name: "prompt_cache_key", Fate: FateNativeOnly, Droppable: true, Sample: `"k"`},
	{Protocol: OpenAI, Name: "verbosity", Fate: FateNativeOnly, Droppable: true, Sample: `"low"`},
	{Protocol: OpenAI, Name: "web_search_options", Fate: FateNativeOnly, Sample: `{}`},
	{Protocol: OpenAI, Name: "functions", Fate: FateNativeOnly, Sample: `[{"name":"f","parameters":{"type":"object"}}]`, Note: "deprecated; use tools"},
	{Protocol: OpenAI, Name: "function_call", Fate: FateNativeOnly, Sample: `"auto"`, Note: "deprecated; use tool_choice"},

	// Anthropic Messages.
	{Protocol: Anthropic, Name: "model", Fate: FateGateway, Note: "the route's model"},
	{Protocol: Anthropic, Name: "stream", Fate: FateGateway, Note: "the gateway streams upstream when the client streams"},
	{Protocol: Anthropic, Name: "messages", Fate: FateTranslated, To: "messages", Note: "tool_result blocks become tool messages; thinking blocks of earlier turns are left out"},
	{Protocol: Anthropic, Name: "system", Fate: FateTranslated, To: "messages", Sample: `"Be brief."`, Note: "the first message, role system"},
	{Protocol: Anthropic, Name: "max_tokens", Fate: FateTranslated, To: "max_tokens", Sample: "50", Note: "at most the route's max_output_tokens"},
	{Protocol: Anthropic, Name: "temperature", Fate: FateTranslated, To: "temperature", Sample: "0.5"},
	{Protocol: Anthropic, Name: "top_p", Fate: FateTranslated, To: "top_p", Sample: "0.9"},
	{Protocol: Anthropic, Name: "stop_sequences", Fate: FateTranslated, To: "stop", Sample: `["END"]`},
	{Protocol: Anthropic, Name: "tools", Fate: FateTranslated, To: "tools", Note: "custom tools; input_schema becomes parameters"},
	{Protocol: Anthropic, Name: "tool_choice", Fate: FateTranslated, To: "tool_choice, parallel_tool_calls", Sample: `{"type":"any"}`, Note: "auto, none, any (required), tool (a named function); disable_parallel_tool_use becomes parallel_tool_calls: false"},
	{Protocol: Anthropic, Name: "metadata", Fate: FateTranslated, To: "user", Sample: `{"user_id":"u-1"}`, Note: "user_id becomes user"},
	{Protocol: Anthropic, Name: "thinking", Fate: FateNativeOnly, Neutral: hasType("disabled"), Sample: `{"type":"enabled","budget_tokens":1024}`, Plain: `{"type":"disabled"}`, Note: "OpenAI-protocol routes return no thinking blocks"},
	{Protocol: Anthropic, Name: "top_k", Fate: FateNativeOnly, Droppable: true, Sample: "40", Note: "OpenAI has no top_k"},
	{Protocol: Anthropic, Name: "service_tier", Fate: FateNativeOnly, Droppable: true, Neutral: isValue(`"auto"`), Sample: `"standard_only"`, Plain: `"auto"`},
	{Protocol: Anthropic, Name: "container", Fate: FateNativeOnly, Sample: `"c-1"`},
	{Protocol: Anthropic, Name: "mcp_servers", Fate: FateNativeOnly, Sample: `[{"type":"url","url":"https://example.com","name":"x"}]`},
	{Protocol: Anthropic, Name: "context_management", Fate: FateNativeOnly, Sample: `{"edits":[]}`},
}

// fieldIndex finds a field by protocol and name.
var fieldIndex = func() map[Protocol]map[string]*Field {
	m := map[Protocol]map[string]*Field{OpenAI: {}, Anthropic: {}}
	for i := range Fields {
		f := &Fields[i]
		m[f.Protocol][f.Name] = f
	}
	return m
}()

// FateOf is what value of field name of protocol p becomes on a route of
// the other protocol.
func FateOf(p Protocol, name string, value json.RawMessage) Fate {
	f := fieldIndex[p][name]
	if f == nil {
		return FateNativeOnly
	}
	if string(bytes.TrimSpace(value)) == "null" || f.Neutral != nil && f.Neutral(value) {
		return FateTranslated
	}
	return f.Fate
}

// Droppable reports whether field name of protocol p may be dropped for a
// route of the other protocol (Field.Droppable).
func Droppable(p Protocol, name string) bool {
	f := fieldIndex[p][name]
	return f != nil && f.Droppable
}

// DroppableNames lists, sorted and once each, the fields of either
// protocol that may be dropped.
func DroppableNames() []string {
	var out []string
	for _, f := range Fields {
		if f.Droppable && !slices.Contains(out, f.Name) {
			out = append(out, f.Name)
		}
	}
	sort.Strings(out)
	return out
}

// nativeOnly lists, sorted, the top-level fields of a request body that
// only a route of its own protocol can serve.
func nativeOnly(p Protocol, body []byte) []string {
	top, err := topLevelMembers(body)
	if err != nil {
		return nil
	}
	var out []string
	for name, v := range top {
		if FateOf(p, name, v) == FateNativeOnly {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}
