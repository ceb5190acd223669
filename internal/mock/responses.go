package mock

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oncegate/oncegate/internal/provider"
)

// The OpenAI Responses API with server-side storage: responses kept by id
// (GET /v1/responses/{id}), conversation objects whose items a response
// appends to when it completes (POST /v1/conversations, GET
// /v1/conversations/{id}/items, DELETE …/items/{item}). Its faults that
// commit a turn and then lose the reply are what a stateful gateway must
// reconcile.

// Faults of the Responses API that commit the turn server-side first.
const (
	FaultCommitThenHang  = "commit_then_hang"  // commit, then never answer (a read timeout after commit)
	FaultCommitThenReset = "commit_then_reset" // commit, then reset (a stream: after After events)
	FaultCommitThen502   = "commit_then_502"   // commit, then a 502 from the infrastructure in front
	// FaultCommitTwiceThen502: the provider's own infrastructure retried
	// the request: the turn is committed twice, then a 502.
	FaultCommitTwiceThen502 = "commit_twice_then_502"
)

// rsState is the mock's stored responses and conversations.
type rsState struct {
	mu        sync.Mutex
	n         int
	responses map[string]*storedResponse
	convs     map[string][]provider.Item
	lookups   int64
}

type storedResponse struct {
	object []byte
	input  []provider.Item
	output []provider.Item
	conv   string
	prev   string
}

func newRSState() *rsState {
	return &rsState{responses: map[string]*storedResponse{}, convs: map[string][]provider.Item{}}
}

// name gives items the ids the mock stores them under: unique, and never
// an output item's (those are the response's id and their index).
func (s *rsState) name(items []provider.Item, prefix string) []provider.Item {
	out := make([]provider.Item, len(items))
	for i, it := range items {
		s.n++
		it.ID = prefix + "_mockin" + strconv.Itoa(s.n)
		if it.Status == "" {
			it.Status = "completed"
		}
		out[i] = it
	}
	return out
}

// history is what a request's answer follows: its conversation's items, or
// its previous response's chain.
func (s *rsState) history(conv, prev string) ([]provider.Item, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if conv != "" {
		items, ok := s.convs[conv]
		if !ok {
			return nil, "Conversation with id '" + conv + "' not found."
		}
		return slices.Clone(items), ""
	}
	var chain [][]provider.Item
	for id := prev; id != ""; {
		r, ok := s.responses[id]
		if !ok {
			return nil, "Previous response with id '" + prev + "' not found."
		}
		chain = append(chain, append(slices.Clone(r.input), r.output...))
		id = r.prev
	}
	var items []provider.Item
	for i := len(chain) - 1; i >= 0; i-- {
		items = append(items, chain[i]...)
	}
	return items, ""
}

// Conversation returns a stored conversation's items, oldest first: the
// ground truth a gateway's turn ledger is checked against.
func (m *Mock) Conversation(id string) []provider.Item {
	m.state.mu.Lock()
	defer m.state.mu.Unlock()
	return slices.Clone(m.state.convs[id])
}

// StoredResponses counts the responses the mock committed.
func (m *Mock) StoredResponses() int {
	m.state.mu.Lock()
	defer m.state.mu.Unlock()
	return len(m.state.responses)
}

// Lookups counts the reads and edits of stored state (retrievals,
// listings, conversation creations and item deletions): calls that
// generate nothing.
func (m *Mock) Lookups() int64 {
	m.state.mu.Lock()
	defer m.state.mu.Unlock()
	return m.state.lookups
}

// rsTurn is what a Responses request commits.
type rsTurn struct {
	req   *provider.ResponsesRequest
	shell provider.ResponseShell
}

func (m *Mock) serveResponses(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil {
		return
	}
	req, err := provider.ParseResponsesRequest(body)
	if err != nil {
		writeError(w, provider.OpenAI, 400, "invalid_request_error", "", err.Error(), nil)
		return
	}
	history, missing := m.state.history(req.Conversation, req.PreviousResponseID)
	if missing != "" {
		writeError(w, provider.OpenAI, 404, "invalid_request_error", "not_found", missing, nil)
		return
	}
	system, msgs := provider.ItemsToMessages(append(history, req.Input...))
	if req.Instructions != nil && *req.Instructions != "" {
		system = append([]string{*req.Instructions}, system...)
	}
	ir := &provider.Request{Model: req.Model, System: strings.Join(system, "\n\n"), Messages: msgs, Tools: req.Tools,
		ToolChoice: req.ToolChoice, MaxTokens: req.MaxOutputTokens, Stream: req.Stream}
	x := m.begin(legacyCodec{provider.Responses}, w, r, askOf(ir, provider.PromptTokens(ir)))
	x.rs = &rsTurn{req: req, shell: provider.ShellOf(req, "resp_mock"+x.id, time.Now().Unix())}
	x.rs.shell.Model = req.Model
	x.finishServe()
}

// afterCommit applies a fault that commits the turn and then loses the
// reply; it reports whether it answered.
func (x *exchange) afterCommit(tokens []string, finish string) bool {
	switch x.faultType() {
	case FaultCommitThenHang:
		x.commit(tokens, finish, "", false)
		x.block(nil)
	case FaultCommitThen502:
		x.commit(tokens, finish, "", false)
		x.infrastructure502()
	case FaultCommitTwiceThen502:
		x.commit(tokens, finish, "", false)
		x.commit(tokens, finish, "b", false)
		x.infrastructure502()
	case FaultCommitThenReset:
		if x.req.stream {
			return false // stream() commits, then resets after After events
		}
		x.commit(tokens, finish, "", false)
		reset(x.w)
	default:
		return false
	}
	return true
}

// infrastructure502 is a load balancer's answer: HTML, not the API's.
func (x *exchange) infrastructure502() {
	x.w.Header().Set("Content-Type", "text/html")
	x.w.WriteHeader(http.StatusBadGateway)
	_, _ = x.w.Write([]byte("<html><body><h1>502 Bad Gateway</h1></body></html>"))
}

// commit stores the answer planned from tokens as a response (suffix
// names a second copy; counted: its output tokens were counted as they
// were sent) and appends the turn's input and output to its
// conversation; it returns the response object.
func (x *exchange) commit(tokens []string, finish, suffix string, counted bool) []byte {
	resp := &provider.Response{Model: x.req.model, Finish: finish}
	if name, ok := x.req.tool(); ok {
		resp.ToolCalls, resp.Finish = []provider.ToolCall{{ID: x.toolCallID() + suffix, Name: name, Arguments: strings.Join(toolArgs, "")}}, provider.FinishToolCalls
		resp.Usage.OutputTokens = int64(len(toolArgs))
	} else {
		resp.Text = strings.Join(tokens, "")
		resp.Usage.OutputTokens = int64(len(tokens))
	}
	resp.Usage.InputTokens = x.prompt
	shell := x.rs.shell
	shell.ID += suffix
	object := provider.EncodeResponsesObject(&shell, resp, time.Now().Unix())
	output, _, _ := provider.ResponseOutput(object)
	s := x.m.state
	s.mu.Lock()
	defer s.mu.Unlock()
	input := s.name(x.rs.req.Input, "msg")
	s.responses[shell.ID] = &storedResponse{object: object, input: input, output: output, conv: x.rs.req.Conversation, prev: x.rs.req.PreviousResponseID}
	if c := x.rs.req.Conversation; c != "" {
		s.convs[c] = append(append(s.convs[c], input...), output...)
	}
	switch {
	case suffix != "":
		x.countOut(resp.Usage.OutputTokens) // a second generation, billed too
	case !counted:
		x.countOut(resp.Usage.OutputTokens - x.out) // generated and billed, though never delivered
	}
	return object
}

func (m *Mock) lookup() {
	m.state.mu.Lock()
	m.state.lookups++
	m.state.mu.Unlock()
}

func (m *Mock) getResponse(w http.ResponseWriter, r *http.Request) {
	m.lookup()
	m.state.mu.Lock()
	sr, ok := m.state.responses[r.PathValue("id")]
	m.state.mu.Unlock()
	if !ok {
		writeError(w, provider.OpenAI, 404, "invalid_request_error", "not_found", "Response with id '"+r.PathValue("id")+"' not found.", nil)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(sr.object)
}

func (m *Mock) createConversation(w http.ResponseWriter, r *http.Request) {
	m.lookup()
	var in struct {
		Items    json.RawMessage `json:"items"`
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 32<<20)).Decode(&in); err != nil {
		writeError(w, provider.OpenAI, 400, "invalid_request_error", "", "invalid body: "+err.Error(), nil)
		return
	}
	var items []provider.Item
	if len(in.Items) > 0 && string(in.Items) != "null" && string(in.Items) != "[]" {
		var err error
		if items, err = provider.ParseInput(in.Items); err != nil {
			writeError(w, provider.OpenAI, 400, "invalid_request_error", "", err.Error(), nil)
			return
		}
	}
	s := m.state
	s.mu.Lock()
	s.n++
	id := "conv_mock" + strconv.Itoa(s.n)
	s.convs[id] = s.name(items, "msg")
	s.mu.Unlock()
	writeConversation(w, id)
}

func writeConversation(w http.ResponseWriter, id string) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "object": "conversation", "created_at": time.Now().Unix(), "metadata": map[string]string{}})
}

// listItems lists a conversation's items: order desc (the default) or
// asc, after an item id, at most limit (default 20, at most 100).
func (m *Mock) listItems(w http.ResponseWriter, r *http.Request) {
	m.lookup()
	m.state.mu.Lock()
	items, ok := m.state.convs[r.PathValue("id")]
	items = slices.Clone(items)
	m.state.mu.Unlock()
	if !ok {
		writeError(w, provider.OpenAI, 404, "invalid_request_error", "not_found", "Conversation with id '"+r.PathValue("id")+"' not found.", nil)
		return
	}
	q := r.URL.Query()
	if q.Get("order") != "asc" {
		slices.Reverse(items)
	}
	if after := q.Get("after"); after != "" {
		for i, it := range items {
			if it.ID == after {
				items = items[i+1:]
				break
			}
		}
	}
	limit := 20
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n >= 1 && n <= 100 {
		limit = n
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(provider.ItemList(items, limit))
}

func (m *Mock) deleteItem(w http.ResponseWriter, r *http.Request) {
	m.lookup()
	id, item := r.PathValue("id"), r.PathValue("item")
	s := m.state
	s.mu.Lock()
	items, ok := s.convs[id]
	found := false
	if i := slices.IndexFunc(items, func(it provider.Item) bool { return it.ID == item }); ok && i >= 0 {
		s.convs[id] = slices.Delete(items, i, i+1)
		found = true
	}
	s.mu.Unlock()
	if !ok || !found {
		writeError(w, provider.OpenAI, 404, "invalid_request_error", "not_found", "Item with id '"+item+"' not found.", nil)
		return
	}
	writeConversation(w, id)
}
