package mock

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// The OpenAI Responses API with server-side storage: responses kept by id
// (GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items),
// conversation objects whose items a response appends to when it
// completes (POST /v1/conversations, GET /v1/conversations/{id}/items,
// DELETE …/items/{item}). Its faults that commit a turn and then lose the
// reply are what a stateful gateway must reconcile.

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
	convs     map[string]*conversation
	lookups   int64
}

// storedResponse is a committed response: its object, the input items it
// was asked with (named), everything it followed (its history, then that
// input) and its output. A turn that follows it reads its context and
// output, whatever became of the responses before it.
type storedResponse struct {
	object  []byte
	input   []Item
	context []Item
	output  []Item
}

// conversation is a conversation object and its items, oldest first.
type conversation struct {
	items    []Item
	created  int64
	metadata json.RawMessage
}

func newRSState() *rsState {
	return &rsState{responses: map[string]*storedResponse{}, convs: map[string]*conversation{}}
}

// itemPrefix starts the ids the mock gives input items of a type.
var itemPrefix = map[string]string{itemMessage: "msg", itemCall: "fc", itemCallOutput: "fco"}

// name gives input items the ids the mock stores them under: unique, and
// never an output item's.
func (s *rsState) name(items []Item) []Item {
	out := make([]Item, len(items))
	for i, it := range items {
		s.n++
		it.ID = itemPrefix[it.Type] + "_mockin" + strconv.Itoa(s.n)
		out[i] = it
	}
	return out
}

// history is what a request's answer follows: its conversation's items, or
// its previous response's chain. A missing one is refused as OpenAI does.
func (s *rsState) history(conv, prev string) ([]Item, func(http.ResponseWriter)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if conv != "" {
		c, ok := s.convs[conv]
		if !ok {
			return nil, func(w http.ResponseWriter) { rsNotFound(w, "Conversation with id '"+conv+"' not found.") }
		}
		return slices.Clone(c.items), nil
	}
	if prev == "" {
		return nil, nil
	}
	r, ok := s.responses[prev]
	if !ok {
		return nil, func(w http.ResponseWriter) {
			oaErrorParam(w, 400, "invalid_request_error", "previous_response_not_found", "previous_response_id",
				"Previous response with id '"+prev+"' not found.")
		}
	}
	return append(slices.Clone(r.context), r.output...), nil
}

// Conversation returns a stored conversation's items, oldest first: the
// ground truth a gateway's turn ledger is checked against.
func (m *Mock) Conversation(id string) []Item {
	m.state.mu.Lock()
	defer m.state.mu.Unlock()
	if c := m.state.convs[id]; c != nil {
		return slices.Clone(c.items)
	}
	return nil
}

// StoredResponses counts the responses the mock committed.
func (m *Mock) StoredResponses() int {
	m.state.mu.Lock()
	defer m.state.mu.Unlock()
	return len(m.state.responses)
}

// Lookups counts the reads and edits of stored state (retrievals,
// listings, deletions and conversation creations): calls that generate
// nothing.
func (m *Mock) Lookups() int64 {
	m.state.mu.Lock()
	defer m.state.mu.Unlock()
	return m.state.lookups
}

// serveResponses answers POST /v1/responses.
func (m *Mock) serveResponses(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil {
		return
	}
	t, bad := decodeResponses(body)
	if bad != nil {
		oaErrorParam(w, 400, "invalid_request_error", "", bad.param, bad.msg)
		return
	}
	history, refuse := m.state.history(t.conv, t.req.PreviousResponseID)
	if refuse != nil {
		refuse(w)
		return
	}
	t.history = history
	x := m.begin(rsCodec{}, w, r, t.ask())
	t.id, t.created = "resp_mock"+x.id, time.Now().Unix()
	x.rs = t
	x.finishServe()
}

// afterCommit applies a fault that commits the turn and then loses the
// reply; it reports whether it answered.
func (x *exchange) afterCommit(tokens []string, finish string) bool {
	switch x.faultType() {
	case FaultCommitThenHang:
		x.commit(x.answerOf(tokens, finish), "", false)
		x.block(nil)
	case FaultCommitThen502:
		x.commit(x.answerOf(tokens, finish), "", false)
		x.infrastructure502()
	case FaultCommitTwiceThen502:
		x.commit(x.answerOf(tokens, finish), "", false)
		x.commit(x.answerOf(tokens, finish), "b", false)
		x.infrastructure502()
	case FaultCommitThenReset:
		if x.req.stream {
			return false // stream() commits, then resets after After events
		}
		x.commit(x.answerOf(tokens, finish), "", false)
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

// commit stores an answer as a response (suffix names a second copy,
// with ids of its own; counted: its output tokens were counted as they
// were sent), appends the turn's input and output to its conversation,
// and returns the response object.
func (x *exchange) commit(a *answer, suffix string, counted bool) []byte {
	t := x.rs
	if suffix != "" && a.tool != nil {
		tc := *a.tool
		tc.id += suffix
		cp := *a
		cp.tool = &tc
		a = &cp
	}
	output := outputItems(x.id+suffix, a)
	object := t.finished(t.id+suffix, output, a)
	s := x.m.state
	s.mu.Lock()
	input := s.name(t.input)
	if t.stored() {
		s.responses[t.id+suffix] = &storedResponse{object: object, input: input, output: output,
			context: append(slices.Clone(t.history), input...)}
	}
	if t.conv != "" {
		c := s.convs[t.conv]
		if c == nil {
			c = &conversation{created: t.created}
			s.convs[t.conv] = c
		}
		c.items = append(append(c.items, input...), output...)
	}
	s.mu.Unlock()
	switch {
	case suffix != "":
		x.countOut(a.usage.output) // a second generation, billed too
	case !counted:
		x.countOut(a.usage.output - x.out) // generated and billed, though never delivered
	}
	return object
}

func (m *Mock) lookup() {
	m.state.mu.Lock()
	m.state.lookups++
	m.state.mu.Unlock()
}

// rsNotFound is OpenAI's 404 for stored state it does not have.
func rsNotFound(w http.ResponseWriter, msg string) {
	oaError(w, 404, "invalid_request_error", "not_found", msg)
}

// stored returns a stored response, or answers 404.
func (m *Mock) stored(w http.ResponseWriter, r *http.Request) *storedResponse {
	m.lookup()
	id := r.PathValue("id")
	m.state.mu.Lock()
	sr := m.state.responses[id]
	m.state.mu.Unlock()
	if sr == nil {
		rsNotFound(w, "Response with id '"+id+"' not found.")
	}
	return sr
}

// getResponse answers GET /v1/responses/{id}: the stored object.
func (m *Mock) getResponse(w http.ResponseWriter, r *http.Request) {
	if sr := m.stored(w, r); sr != nil {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(sr.object)
	}
}

// deleteResponse answers DELETE /v1/responses/{id}: the response is gone
// (a turn can no longer follow it); the items it added to a conversation
// stay there.
func (m *Mock) deleteResponse(w http.ResponseWriter, r *http.Request) {
	if m.stored(w, r) == nil {
		return
	}
	id := r.PathValue("id")
	m.state.mu.Lock()
	delete(m.state.responses, id)
	m.state.mu.Unlock()
	writeJSON(w, 200, map[string]any{"id": id, "object": "response", "deleted": true})
}

// inputItems answers GET /v1/responses/{id}/input_items: the items the
// request sent (not its history), with the ids the mock gave them.
func (m *Mock) inputItems(w http.ResponseWriter, r *http.Request) {
	if sr := m.stored(w, r); sr != nil {
		writeItems(w, r, slices.Clone(sr.input))
	}
}

// createConversation answers POST /v1/conversations.
func (m *Mock) createConversation(w http.ResponseWriter, r *http.Request) {
	m.lookup()
	var in struct {
		Items    json.RawMessage `json:"items"`
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 32<<20)).Decode(&in); err != nil && err != io.EOF {
		oaErrorParam(w, 400, "invalid_request_error", "", "", "We could not parse the JSON body of your request.")
		return
	}
	var items []Item
	if isSet(in.Items) {
		var bad *rsInvalid
		if items, bad = parseItems(in.Items, "items"); bad != nil {
			oaErrorParam(w, 400, "invalid_request_error", "", bad.param, bad.msg)
			return
		}
	}
	s := m.state
	s.mu.Lock()
	s.n++
	id := "conv_mock" + strconv.Itoa(s.n)
	c := &conversation{items: s.name(items), created: time.Now().Unix(), metadata: in.Metadata}
	s.convs[id] = c
	s.mu.Unlock()
	writeConversation(w, id, c)
}

// writeConversation writes a conversation object.
func writeConversation(w http.ResponseWriter, id string, c *conversation) {
	writeJSON(w, 200, map[string]any{"id": id, "object": "conversation", "created_at": c.created, "metadata": orRaw(c.metadata, `{}`)})
}

// listItems answers GET /v1/conversations/{id}/items.
func (m *Mock) listItems(w http.ResponseWriter, r *http.Request) {
	m.lookup()
	m.state.mu.Lock()
	c := m.state.convs[r.PathValue("id")]
	var items []Item
	if c != nil {
		items = slices.Clone(c.items)
	}
	m.state.mu.Unlock()
	if c == nil {
		rsNotFound(w, "Conversation with id '"+r.PathValue("id")+"' not found.")
		return
	}
	writeItems(w, r, items)
}

// writeItems writes a page of items, oldest first: order desc (the
// default) or asc, after an item id, at most limit (default 20, at most
// 100), with first_id, last_id and has_more.
func writeItems(w http.ResponseWriter, r *http.Request, items []Item) {
	q := r.URL.Query()
	if q.Get("order") != "asc" {
		slices.Reverse(items)
	}
	if after := q.Get("after"); after != "" {
		if i := slices.IndexFunc(items, func(it Item) bool { return it.ID == after }); i >= 0 {
			items = items[i+1:]
		}
	}
	limit := 20
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n >= 1 && n <= 100 {
		limit = n
	}
	more := len(items) > limit
	if more {
		items = items[:limit]
	}
	data := make([]map[string]any, len(items))
	first, last := "", ""
	for i := range items {
		data[i] = items[i].wire("completed")
	}
	if len(items) > 0 {
		first, last = items[0].ID, items[len(items)-1].ID
	}
	writeJSON(w, 200, map[string]any{"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": more})
}

// deleteItem answers DELETE /v1/conversations/{id}/items/{item} with the
// conversation.
func (m *Mock) deleteItem(w http.ResponseWriter, r *http.Request) {
	m.lookup()
	id, item := r.PathValue("id"), r.PathValue("item")
	s := m.state
	s.mu.Lock()
	c, found := s.convs[id], false
	if c != nil {
		if i := slices.IndexFunc(c.items, func(it Item) bool { return it.ID == item }); i >= 0 {
			c.items = slices.Delete(c.items, i, i+1)
			found = true
		}
	}
	s.mu.Unlock()
	if !found {
		rsNotFound(w, "Item with id '"+item+"' not found.")
		return
	}
	writeConversation(w, id, c)
}

// oaErrorParam writes an error in OpenAI's shape naming the parameter at
// fault ("" for none).
func oaErrorParam(w http.ResponseWriter, status int, typ, code, param, msg string) {
	var c, p any
	if code != "" {
		c = code
	}
	if param != "" {
		p = param
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": p, "code": c}})
}
