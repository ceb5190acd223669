package bedrock

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/oncegate/oncegate/internal/provider"
)

// The Converse request body (docs/providers.md; the JSON names are those
// of the Converse API reference and of aws-sdk-go-v2/service/bedrockruntime).
type converseRequest struct {
	Messages        []message         `json:"messages"`
	System          []systemBlock     `json:"system,omitempty"`
	InferenceConfig *inferenceConfig  `json:"inferenceConfig,omitempty"`
	ToolConfig      *toolConfig       `json:"toolConfig,omitempty"`
	RequestMetadata map[string]string `json:"requestMetadata,omitempty"`
}

type message struct {
	Role    string         `json:"role"`
	Content []contentBlock `json:"content"`
}

type systemBlock struct {
	Text string `json:"text"`
}

type contentBlock struct {
	Text       *string     `json:"text,omitempty"`
	Image      *imageBlock `json:"image,omitempty"`
	ToolUse    *toolUse    `json:"toolUse,omitempty"`
	ToolResult *toolResult `json:"toolResult,omitempty"`
}

type imageBlock struct {
	Format string      `json:"format"`
	Source imageSource `json:"source"`
}

type imageSource struct {
	Bytes string `json:"bytes"` // base64, as a JSON blob is
}

type toolUse struct {
	ToolUseID string          `json:"toolUseId"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
}

type toolResult struct {
	ToolUseID string              `json:"toolUseId"`
	Content   []toolResultContent `json:"content"`
	Status    string              `json:"status,omitempty"`
}

type toolResultContent struct {
	Text  *string     `json:"text,omitempty"`
	Image *imageBlock `json:"image,omitempty"`
}

type inferenceConfig struct {
	MaxTokens     int64    `json:"maxTokens,omitempty"`
	Temperature   *float64 `json:"temperature,omitempty"`
	TopP          *float64 `json:"topP,omitempty"`
	StopSequences []string `json:"stopSequences,omitempty"`
}

type toolConfig struct {
	Tools      []tool      `json:"tools"`
	ToolChoice *toolChoice `json:"toolChoice,omitempty"`
}

type tool struct {
	ToolSpec toolSpec `json:"toolSpec"`
}

type toolSpec struct {
	Name        string      `json:"name"`
	Description string      `json:"description,omitempty"`
	InputSchema inputSchema `json:"inputSchema"`
}

type inputSchema struct {
	JSON json.RawMessage `json:"json"`
}

type empty struct{}

type toolChoice struct {
	Auto *empty     `json:"auto,omitempty"`
	Any  *empty     `json:"any,omitempty"`
	Tool *namedTool `json:"tool,omitempty"`
}

type namedTool struct {
	Name string `json:"name"`
}

// BuildRequest writes the Converse body for one attempt on a bedrock route
// t (its Model goes in the path, see Path). A non-nil prefix continues a
// partial answer: it becomes a trailing assistant message, which only a
// route declaring assistant_prefill may be sent. in is never modified.
// A field Converse cannot carry is an *provider.InvalidRequestError naming
// it (see Fields).
func BuildRequest(in *provider.ClientRequest, t provider.Target, prefix *string) (*provider.Built, error) {
	ir := in.IR
	if prefix != nil {
		if t.Continuation != provider.ContinuePrefill {
			return nil, fmt.Errorf("bedrock: route %s cannot continue an answer (continuation %q; Converse supports only assistant_prefill)", t.Model, t.Continuation)
		}
		ir = provider.WithAssistantPrefix(ir, *prefix)
	}
	limit := t.MaxTokens
	if limit == 0 {
		limit = ir.MaxTokens
	}
	if limit == 0 {
		limit = t.MaxOutputTokens
	}
	body, err := Build(ir, limit)
	if err != nil {
		return nil, err
	}
	return &provider.Built{Body: body, PromptTokens: provider.PromptTokens(ir)}, nil
}

// Build writes ir as a Converse request body with output limit maxTokens
// (0: the model's default).
func Build(ir *provider.Request, maxTokens int64) ([]byte, error) {
	if ir.JSONSchema {
		return nil, refuse("response_format", "a JSON-schema response format is not carried to bedrock routes")
	}
	if ir.Thinking {
		return nil, refuse("thinking", "extended thinking is not carried to bedrock routes")
	}
	out := converseRequest{}
	if ir.System != "" {
		out.System = []systemBlock{{Text: ir.System}}
	}
	msgs, hasToolBlocks, err := messages(ir.Messages)
	if err != nil {
		return nil, err
	}
	out.Messages = msgs
	ic := inferenceConfig{MaxTokens: maxTokens, TopP: ir.TopP, StopSequences: ir.Stop}
	if ir.Temperature != nil {
		if *ir.Temperature < 0 || *ir.Temperature > 1 {
			return nil, refuse("temperature", "bedrock routes take a temperature from 0 to 1")
		}
		ic.Temperature = ir.Temperature
	}
	if ic.MaxTokens > 0 || ic.Temperature != nil || ic.TopP != nil || len(ic.StopSequences) > 0 {
		out.InferenceConfig = &ic
	}
	if out.ToolConfig, err = tools(ir, hasToolBlocks); err != nil {
		return nil, err
	}
	if ir.User != "" {
		if !validMetadata(ir.User) {
			return nil, refuse("user", "bedrock's requestMetadata takes at most 256 letters, digits, spaces and :_@$#=/+,-.")
		}
		out.RequestMetadata = map[string]string{"user": ir.User}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, fmt.Errorf("bedrock: encode request: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func refuse(param, msg string) error {
	return &provider.InvalidRequestError{Param: param, Message: msg}
}

// messages translates the turns. Converse wants user and assistant turns
// alternating: tool results become toolResult blocks of a user turn, and
// consecutive turns of one role are merged into one. A turn left with no
// content (only empty text) carries nothing and is left out.
func messages(in []provider.Message) ([]message, bool, error) {
	var out []message
	hasTool := false
	for i := range in {
		m := &in[i]
		role := m.Role
		var blocks []contentBlock
		switch m.Role {
		case provider.RoleUser, provider.RoleAssistant:
			for j, p := range m.Parts {
				b, err := part(p, fmt.Sprintf("messages[%d].content[%d]", i, j))
				if err != nil {
					return nil, false, err
				}
				if b != nil {
					blocks = append(blocks, *b)
				}
			}
			if m.Role == provider.RoleUser && len(m.ToolCalls) > 0 {
				return nil, false, refuse(fmt.Sprintf("messages[%d].tool_calls", i), "only an assistant turn calls tools")
			}
			for _, c := range m.ToolCalls {
				input, err := toolInput(c.Arguments)
				if err != nil {
					return nil, false, refuse(fmt.Sprintf("messages[%d].tool_calls", i), "tool call "+c.ID+": arguments are not a JSON object")
				}
				blocks = append(blocks, contentBlock{ToolUse: &toolUse{ToolUseID: c.ID, Name: c.Name, Input: input}})
				hasTool = true
			}
		case provider.RoleTool:
			role = provider.RoleUser
			res := &toolResult{ToolUseID: m.ToolCallID, Content: []toolResultContent{}}
			if m.IsError {
				res.Status = "error"
			}
			for j, p := range m.Parts {
				b, err := part(p, fmt.Sprintf("messages[%d].content[%d]", i, j))
				if err != nil {
					return nil, false, err
				}
				if b != nil {
					res.Content = append(res.Content, toolResultContent{Text: b.Text, Image: b.Image})
				}
			}
			blocks = append(blocks, contentBlock{ToolResult: res})
			hasTool = true
		default:
			return nil, false, refuse(fmt.Sprintf("messages[%d].role", i), "role "+m.Role+" is not carried to bedrock routes")
		}
		if len(blocks) == 0 {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Role == role {
			out[n-1].Content = append(out[n-1].Content, blocks...)
			continue
		}
		out = append(out, message{Role: role, Content: blocks})
	}
	return out, hasTool, nil
}

// part translates one content part; nil for empty text, which Converse
// refuses as a blank block.
func part(p provider.Part, param string) (*contentBlock, error) {
	switch p.Type {
	case provider.PartText:
		if p.Text == "" {
			return nil, nil
		}
		t := p.Text
		return &contentBlock{Text: &t}, nil
	case provider.PartImage:
		img, err := image(p, param)
		if err != nil {
			return nil, err
		}
		return &contentBlock{Image: img}, nil
	}
	return nil, refuse(param, p.Type+" content is not carried to bedrock routes")
}

// imageFormats maps media types to Converse's image formats.
var imageFormats = map[string]string{"image/png": "png", "image/jpeg": "jpeg", "image/jpg": "jpeg", "image/gif": "gif", "image/webp": "webp"}

// image translates an image part: base64 data, or a data: URL. Converse
// fetches no URLs (its other source is an S3 location), so an http(s)
// image URL is refused.
func image(p provider.Part, param string) (*imageBlock, error) {
	media, data := p.MediaType, p.Data
	if data == "" {
		u := p.ImageURL
		if !strings.HasPrefix(u, "data:") {
			return nil, refuse(param, "bedrock routes take images as data, not by URL")
		}
		meta, payload, ok := strings.Cut(strings.TrimPrefix(u, "data:"), ",")
		if !ok || !strings.HasSuffix(meta, ";base64") {
			return nil, refuse(param, "an image data URL must be base64")
		}
		media, data = strings.TrimSuffix(meta, ";base64"), payload
	}
	format, ok := imageFormats[strings.ToLower(media)]
	if !ok {
		return nil, refuse(param, "bedrock routes take png, jpeg, gif and webp images, not "+media)
	}
	return &imageBlock{Format: format, Source: imageSource{Bytes: data}}, nil
}

// toolInput is a tool call's arguments as the JSON object Converse wants.
func toolInput(args string) (json.RawMessage, error) {
	if strings.TrimSpace(args) == "" {
		return json.RawMessage("{}"), nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(args), &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	return json.RawMessage(args), nil
}

// tools translates the tools and the tool choice. Converse has no "none":
// a request that forbids tool calls is sent without its tools — unless
// its history holds tool calls or results, which Converse accepts only
// with a toolConfig, and then it is refused.
func tools(ir *provider.Request, hasToolBlocks bool) (*toolConfig, error) {
	if ir.ParallelToolCalls != nil && !*ir.ParallelToolCalls && len(ir.Tools) > 0 {
		return nil, refuse("parallel_tool_calls", "bedrock routes cannot forbid parallel tool calls")
	}
	if len(ir.Tools) == 0 {
		if hasToolBlocks {
			return nil, refuse("tools", "a conversation with tool calls needs its tools on bedrock routes")
		}
		return nil, nil
	}
	tc := &toolConfig{}
	if ch := ir.ToolChoice; ch != nil {
		switch ch.Mode {
		case provider.ToolAuto:
			tc.ToolChoice = &toolChoice{Auto: &empty{}}
		case provider.ToolRequired:
			tc.ToolChoice = &toolChoice{Any: &empty{}}
		case provider.ToolNamed:
			tc.ToolChoice = &toolChoice{Tool: &namedTool{Name: ch.Name}}
		case provider.ToolNone:
			if hasToolBlocks {
				return nil, refuse("tool_choice", "bedrock routes cannot forbid tools in a conversation that used them")
			}
			return nil, nil
		default:
			return nil, refuse("tool_choice", "unknown tool choice "+ch.Mode)
		}
	}
	for _, t := range ir.Tools {
		schema := t.Parameters
		if len(bytes.TrimSpace(schema)) == 0 || string(bytes.TrimSpace(schema)) == "null" {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		tc.Tools = append(tc.Tools, tool{ToolSpec: toolSpec{Name: t.Name, Description: t.Description, InputSchema: inputSchema{JSON: schema}}})
	}
	return tc, nil
}

// validMetadata reports whether s fits a requestMetadata value.
func validMetadata(s string) bool {
	if len(s) > 256 {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(" \t\n:_@$#=/+,-.", r)
		if !ok {
			return false
		}
	}
	return true
}
