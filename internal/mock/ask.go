package mock

// ask is what the mock needs of a generation request, whatever its wire
// protocol: each codec decodes its own body into one (docs/mock.md, "How
// the fakes are built").
type ask struct {
	model     string
	system    string
	turns     []turn
	stream    bool
	maxTokens int64 // 0: not set
	tools     []string
	// toolMode is "" or "auto", "none", "required" (any tool) or "tool"
	// (toolName only).
	toolMode string
	toolName string
	thinking bool
	// choices is how many answers the request asks for (OpenAI's n,
	// Gemini's candidateCount); 0 or 1: one.
	choices int
	// promptTokens is the prompt's size as the mock reports it.
	promptTokens int64
}

// turn is one message of a conversation.
type turn struct {
	role string // roleUser, roleAssistant or roleTool
	text string
	// calls is the names and arguments of the turn's tool calls, in order;
	// hasCalls is whether it made any.
	calls    string
	hasCalls bool
}

// Roles of a turn.
const (
	roleUser      = "user"
	roleAssistant = "assistant"
	roleTool      = "tool"
)

// Finish reasons of an answer, in the mock's own terms; each codec names
// them in its protocol.
const (
	finishStop   = "stop"
	finishLength = "length"
	finishTools  = "tool_calls"
)

// isPrefix reports whether a trailing turn is an assistant prefix to
// continue (and not a completed tool-call turn).
func (t *turn) isPrefix() bool { return t.role == roleAssistant && !t.hasCalls }

// continuation reports whether the request ends with a prefix to continue.
func (a *ask) continuation() bool {
	return len(a.turns) > 0 && a.turns[len(a.turns)-1].isPrefix()
}

// tool is the tool the mock calls, if the request offers tools, lets the
// model use one and ends with the user's turn.
func (a *ask) tool() (string, bool) {
	if len(a.tools) == 0 || a.toolMode == "none" {
		return "", false
	}
	if n := len(a.turns); n == 0 || a.turns[n-1].role != roleUser {
		return "", false
	}
	name := a.tools[0]
	if a.toolMode == "tool" {
		for _, t := range a.tools {
			if t == a.toolName {
				name = t
			}
		}
	}
	return name, true
}

// usage is what an answer reports it cost.
type usage struct {
	input, output, cached, cacheWrite int64
}

// refusal is a request the fake refuses, in the provider's own words.
type refusal string

func (r refusal) Error() string { return string(r) }
