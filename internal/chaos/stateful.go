package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/receipt"

	"github.com/openai/openai-go/v3"
	oaopt "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// statefulModel is the alias whose routes keep conversations at the
// provider (docs/conversations.md, "Stateful routes").
const statefulModel = "chat-stateful"

// statefulTries is how many times an application tries one turn, on
// whichever gateway is up, before it stops the conversation.
const statefulTries = 6

// statefulConversation holds a conversation on the stateful alias, as an
// application would: each turn is tried until it is answered, at most
// statefulTries times, each try through the official SDK (and its own
// retries) on a gateway pick names. Each turn has its key, which every try
// of it sends: tries minutes apart, on another gateway after a kill, are
// one user action, and an answer the application never read is replayed,
// not generated again as a second branch (docs/conversations.md).
func statefulConversation(ctx context.Context, pick func() string, prof profile, i int, o *outcome) {
	prev := ""
	for k := 1; k <= conversationTurns; k++ {
		input := fmt.Sprintf("Chaos stateful conversation %d, turn %d.", i, k)
		var t *turn
		err := errors.New("no gateway was up")
		for try := 0; try < statefulTries && t == nil && ctx.Err() == nil; try++ {
			base := pick()
			if base == "" {
				pause(ctx, 10*time.Millisecond) // every gateway is restarting
				continue
			}
			t, err = statefulTurn(ctx, base, prof, statefulKey(i, k), input, prev, o.stream)
		}
		if t == nil {
			o.pending, o.err = input, err.Error()
			return
		}
		o.turns = append(o.turns, *t)
		prev = t.responseID
	}
	o.ok = true
}

// statefulTurn sends one try of a turn and returns what the client read.
func statefulTurn(ctx context.Context, base string, prof profile, key, input, prev string, stream bool) (*turn, error) {
	var hdr http.Header
	opts := []oaopt.RequestOption{oaopt.WithBaseURL(base + "/v1"), oaopt.WithAPIKey(prof.apiKey),
		oaopt.WithMiddleware(func(r *http.Request, next oaopt.MiddlewareNext) (*http.Response, error) {
			res, err := next(r)
			if res != nil && res.Header != nil {
				hdr = res.Header.Clone()
			}
			return res, err
		})}
	opts = append(opts, oaopt.WithHeader("Idempotency-Key", key))
	c := openai.NewClient(opts...)
	p := statefulParams(input, prev)
	t := &turn{input: input}
	if stream {
		st := c.Responses.NewStreaming(ctx, p)
		var text strings.Builder
		for st.Next() {
			switch ev := st.Current(); ev.Type {
			case "response.output_text.delta":
				text.WriteString(ev.Delta)
			case "response.completed":
				t.responseID = ev.Response.ID
			}
		}
		if err := st.Err(); err != nil {
			return nil, err
		}
		if t.responseID == "" {
			return nil, errors.New("the stream ended without response.completed")
		}
		t.text = text.String()
	} else {
		res, err := c.Responses.New(ctx, p)
		if err != nil {
			return nil, err
		}
		t.text, t.responseID = res.OutputText(), res.ID
	}
	if hdr != nil {
		t.requestID = hdr.Get("X-Oncegate-Request-Id")
	}
	return t, nil
}

func statefulParams(input, prev string) responses.ResponseNewParams {
	p := responses.ResponseNewParams{Model: statefulModel, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(input)}}
	if prev != "" {
		p.PreviousResponseID = openai.String(prev)
	}
	return p
}

// statefulKey is the key of conversation i's turn k (from 1).
func statefulKey(i, k int) string {
	if k == 1 {
		return fmt.Sprintf("chaos-stateful-%d", i)
	}
	return fmt.Sprintf("chaos-stateful-%d-turn-%d", i, k)
}

// finishConversations is the applications coming back once the gateways
// have settled: each stateful conversation's pending turn is tried once
// more (an answer that was committed is adopted, never generated again),
// and its latest response is read, which has the gateway read the
// provider's conversation again for copies committed late.
func finishConversations(ctx context.Context, base string, outcomes []outcome) error {
	for i := range outcomes {
		o := &outcomes[i]
		if o.kind != kindStateful {
			continue
		}
		prev := ""
		if n := len(o.turns); n > 0 {
			prev = o.turns[n-1].responseID
		}
		if o.pending != "" {
			// Sent as it was sent before: the same key is the same turn.
			t, err := statefulTurn(ctx, base, o.prof, statefulKey(i, len(o.turns)+1), o.pending, prev, o.stream)
			if err != nil {
				o.err += "; tried again after the run: " + err.Error()
			} else {
				o.turns = append(o.turns, *t)
				o.pending, o.finishedLate = "", true
				prev = t.responseID
			}
		}
		if prev == "" {
			continue
		}
		c := openai.NewClient(oaopt.WithBaseURL(base+"/v1"), oaopt.WithAPIKey(o.prof.apiKey))
		if _, err := c.Responses.Get(ctx, prev, responses.ResponseGetParams{}); err != nil {
			return fmt.Errorf("stateful conversation %d: read its latest response %s: %w", i, prev, err)
		}
	}
	return nil
}

// providerConversations checks the provider's side of every stateful
// conversation: the conversation it stores holds exactly the turns the
// client read, each once, in order; and every response it committed is a
// turn a conversation kept or an orphan the gateway removed and recorded.
func providerConversations(ctx context.Context, receipts map[string]*receipt.Receipt, outcomes []outcome, m *mock.Mock, st readStore,
	example func(string, ...any)) (Row, error) {
	row := Row{Invariant: "stateful conversations: the provider holds what clients read, once"}
	roots := map[string]string{} // root response id → tenant
	for _, r := range receipts {
		if r.Request.Stateful && r.Conversation != nil {
			roots[r.Conversation.ID] = r.Tenant
		}
	}
	kept, orphans := 0, 0
	done := map[string]*ledger.Turn{}
	for root, tenant := range roots {
		turns, err := st.ConversationTurns(ctx, tenant, root)
		if err != nil {
			return row, fmt.Errorf("read conversation %s: %w", root, err)
		}
		for _, t := range turns {
			if t.State == ledger.TurnDone {
				kept++
				done[t.ResponseID] = t
			}
		}
		os, err := st.Orphans(ctx, tenant, root)
		if err != nil {
			return row, fmt.Errorf("read conversation %s's orphans: %w", root, err)
		}
		orphans += len(os)
	}
	late, stopped, stoppedBy := 0, 0, ""
	for i, o := range outcomes {
		if o.kind != kindStateful || len(o.turns) == 0 {
			continue
		}
		row.Checked++
		if o.finishedLate {
			late++
		}
		if o.pending != "" {
			stopped++
			if stoppedBy == "" {
				stoppedBy = fmt.Sprintf(" (conversation %d: %s)", i, firstLine([]byte(o.err)))
			}
		}
		last := o.turns[len(o.turns)-1]
		tip := done[last.responseID]
		if tip == nil {
			row.Violations++
			example("stateful conversation %d: the ledger holds no committed turn %s", i, last.responseID)
			continue
		}
		var up struct {
			Conversation string `json:"conversation"`
		}
		_ = json.Unmarshal(tip.Upstream, &up)
		var held []provider.Message
		for _, it := range m.Conversation(up.Conversation) {
			held = append(held, provider.Message{Role: it.Role, Parts: []provider.Part{{Type: provider.PartText, Text: it.Text()}}})
		}
		var read []provider.Message
		for _, t := range o.turns {
			read = append(read, provider.Message{Role: provider.RoleUser, Parts: []provider.Part{{Type: provider.PartText, Text: t.input}}},
				provider.Message{Role: provider.RoleAssistant, Parts: []provider.Part{{Type: provider.PartText, Text: t.text}}})
		}
		if diff := firstDifference(held, read); diff != "" {
			row.Violations++
			example("stateful conversation %d (upstream %s): %s", i, up.Conversation, diff)
		}
	}
	stored := m.StoredResponses()
	if stored != kept+orphans {
		row.Violations++
		example("the provider committed %d responses; the conversations kept %d turns and recorded %d orphans", stored, kept, orphans)
	}
	row.Note = fmt.Sprintf("%d responses committed = %d turns kept + %d orphans removed; %d pending turns answered when tried again after the run, %d conversations stopped short%s",
		stored, kept, orphans, late, stopped, stoppedBy)
	return row, nil
}

// firstDifference describes where the provider's messages and the
// client's differ ("" when they are the same).
func firstDifference(held, read []provider.Message) string {
	for j := range max(len(held), len(read)) {
		switch {
		case j >= len(held):
			return fmt.Sprintf("the provider lacks message %d (%s %q)", j+1, read[j].Role, messageText(read[j]))
		case j >= len(read):
			return fmt.Sprintf("the provider holds message %d (%s %q) no client read", j+1, held[j].Role, messageText(held[j]))
		case held[j].Role != read[j].Role || messageText(held[j]) != messageText(read[j]):
			return fmt.Sprintf("message %d: the provider holds %s %q, the client read %s %q", j+1,
				held[j].Role, messageText(held[j]), read[j].Role, messageText(read[j]))
		}
	}
	return ""
}

func messageText(m provider.Message) string {
	var b strings.Builder
	for _, p := range m.Parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// responseID is the id of the response in a Responses answer: the JSON
// object's, or a stream's response.completed event's.
func responseID(b []byte, stream bool) string {
	var obj struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Response struct {
			ID string `json:"id"`
		} `json:"response"`
	}
	if !stream {
		_ = json.Unmarshal(b, &obj)
		return obj.ID
	}
	for _, line := range strings.Split(string(b), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok && json.Unmarshal([]byte(data), &obj) == nil && obj.Type == "response.completed" {
			return obj.Response.ID
		}
	}
	return ""
}
