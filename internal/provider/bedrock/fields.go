package bedrock

import (
	"bytes"
	"encoding/json"
	"sort"

	"github.com/oncegate/oncegate/internal/provider"
)

// Field is one client request field's fate on a bedrock route: the
// bedrock column of the field table (docs/translation.md,
// docs/providers.md). A request on either client protocol reaches a
// bedrock route translated — Converse is neither protocol — so every
// field of provider.Fields has a row here.
type Field struct {
	Protocol provider.Protocol
	Name     string
	// Fate is what a value that asks for something becomes; a value
	// Neutral accepts (and null) is translated whatever Fate says.
	Fate    provider.Fate
	Neutral func(json.RawMessage) bool
	// Ineligible reports a value of a translated field that Converse
	// cannot carry, making bedrock routes ineligible for the request.
	Ineligible func(json.RawMessage) bool
	// To is the Converse member a translated value becomes, a dotted
	// path ("" for gateway fields and those with no equivalent).
	To string
	// Note says what happens, for the docs.
	Note string
	// Droppable: as provider.Field.Droppable.
	Droppable bool
	// Sample and Plain: as provider.Field's, for the tests.
	Sample, Plain string
}

// override is the bedrock row of a field where it differs from the
// OpenAI ↔ Anthropic one.
type override struct {
	fate       provider.Fate
	neutral    func(json.RawMessage) bool
	ineligible func(json.RawMessage) bool
	to, note   string
}

var overrides = map[provider.Protocol]map[string]override{
	provider.OpenAI: {
		"model":                 {note: "the route's model id or inference profile, in the path"},
		"stream":                {note: "Converse, or ConverseStream when the client streams"},
		"stream_options":        {note: "ConverseStream always ends with its usage (metadata)"},
		"messages":              {to: "messages", note: "system and developer messages become system blocks; tool results become toolResult blocks of a user turn; images become image blocks (base64 or data: URLs; an http(s) image URL is refused: Converse fetches none)"},
		"max_tokens":            {to: "inferenceConfig.maxTokens", note: "at most the route's max_output_tokens"},
		"max_completion_tokens": {to: "inferenceConfig.maxTokens", note: "at most the route's max_output_tokens"},
		"temperature":           {to: "inferenceConfig.temperature", note: "0–1 is carried; above 1 only OpenAI routes serve"},
		"top_p":                 {to: "inferenceConfig.topP"},
		"stop":                  {to: "inferenceConfig.stopSequences"},
		"tools":                 {to: "toolConfig.tools", note: "function tools; parameters become toolSpec.inputSchema.json"},
		"tool_choice":           {to: "toolConfig.toolChoice", note: "auto, required (any), a named function (tool); none sends no tools (in a conversation that already used tools, bedrock routes are ineligible)"},
		"parallel_tool_calls":   {fate: provider.FateNativeOnly, note: "Converse cannot forbid parallel tool calls: false makes bedrock routes ineligible"},
		"user":                  {to: "requestMetadata.user", note: "invocation-log metadata"},
		"safety_identifier":     {to: "requestMetadata.user", note: "preferred over user when both are sent"},
		"response_format":       {note: "Converse is sent no response format"},
		"seed":                  {note: "Converse has no seed"},
		"logprobs":              {note: "Converse returns no log probabilities"},
		"reasoning_effort":      {note: "not a Converse parameter"},
		"metadata":              {note: "not carried"},
	},
	provider.Anthropic: {
		"model":          {note: "the route's model id or inference profile, in the path"},
		"stream":         {note: "Converse, or ConverseStream when the client streams"},
		"messages":       {to: "messages", note: "tool_use and tool_result blocks become toolUse and toolResult; images become image blocks (base64; a URL source is refused); thinking blocks of earlier turns are left out"},
		"system":         {to: "system", note: "one system text block"},
		"max_tokens":     {to: "inferenceConfig.maxTokens", note: "at most the route's max_output_tokens"},
		"temperature":    {to: "inferenceConfig.temperature"},
		"top_p":          {to: "inferenceConfig.topP"},
		"stop_sequences": {to: "inferenceConfig.stopSequences"},
		"tools":          {to: "toolConfig.tools", note: "custom tools; input_schema becomes toolSpec.inputSchema.json"},
		"tool_choice": {to: "toolConfig.toolChoice", ineligible: disablesParallel,
			note: "auto, any, tool (named); none sends no tools (in a conversation that already used tools, bedrock routes are ineligible); disable_parallel_tool_use: true makes bedrock routes ineligible (Converse cannot forbid parallel calls)"},
		"metadata": {to: "requestMetadata.user", note: "user_id becomes requestMetadata.user"},
		"thinking": {note: "extended thinking is not sent to bedrock routes"},
		"top_k":    {note: "not a Converse parameter"},
	},
}

// disablesParallel reports an Anthropic tool_choice that forbids parallel
// tool calls.
func disablesParallel(raw json.RawMessage) bool {
	var v struct {
		Disable bool `json:"disable_parallel_tool_use"`
	}
	return json.Unmarshal(raw, &v) == nil && v.Disable
}

// Fields is the bedrock column: one row per field of provider.Fields.
var Fields = func() []Field {
	out := make([]Field, 0, len(provider.Fields))
	for _, f := range provider.Fields {
		o := overrides[f.Protocol][f.Name]
		row := Field{Protocol: f.Protocol, Name: f.Name, Fate: f.Fate, Neutral: f.Neutral, To: o.to, Note: o.note,
			Droppable: f.Droppable, Ineligible: o.ineligible, Sample: f.Sample, Plain: f.Plain}
		if o.fate != "" {
			row.Fate = o.fate
		}
		if o.neutral != nil {
			row.Neutral = o.neutral
		}
		if o.note == "" && row.Fate == provider.FateNativeOnly {
			row.Note = "not a Converse parameter"
		}
		if o.note == "" && row.Fate == provider.FateRejected {
			row.Note = f.Note
		}
		out = append(out, row)
	}
	return out
}()

var fieldIndex = func() map[provider.Protocol]map[string]*Field {
	m := map[provider.Protocol]map[string]*Field{}
	for i := range Fields {
		f := &Fields[i]
		if m[f.Protocol] == nil {
			m[f.Protocol] = map[string]*Field{}
		}
		m[f.Protocol][f.Name] = f
	}
	return m
}()

// FateOf is what value of field name of a protocol-p request becomes on a
// bedrock route. A field the table does not know is native only.
func FateOf(p provider.Protocol, name string, value json.RawMessage) provider.Fate {
	f := fieldIndex[p][name]
	if f == nil {
		return provider.FateNativeOnly
	}
	if string(bytes.TrimSpace(value)) == "null" {
		return provider.FateTranslated
	}
	if f.Ineligible != nil && f.Ineligible(value) {
		return provider.FateNativeOnly
	}
	if f.Neutral != nil && f.Neutral(value) {
		return provider.FateTranslated
	}
	return f.Fate
}

// NativeOnly lists, sorted, the top-level fields of a protocol-p request
// body that make bedrock routes ineligible for it (the bedrock
// counterpart of provider.ClientRequest.NativeOnly).
func NativeOnly(p provider.Protocol, body []byte) []string {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return nil
	}
	var out []string
	for name, v := range top {
		if FateOf(p, name, v) == provider.FateNativeOnly {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}
