package conversation

import (
	"encoding/json"
	"net/http"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/identity"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/policy"
)

// A turn is one user action however its answer is delivered: a retry
// that asks for it as a stream when the first asked for JSON, or the
// other way round, is the same turn, and gets the answer in the form it
// asked for (docs/conversations.md).

// turnSHA is a turn request's identity: the SHA-256 of its canonical body
// without "stream" and "stream_options", which say how the answer is
// delivered, not what is asked. canon is the body in canonical JSON.
func turnSHA(canon []byte) (string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(canon, &m); err != nil {
		return "", err
	}
	delete(m, "stream")
	delete(m, "stream_options")
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	if b, err = identity.Canonicalize(b); err != nil {
		return "", err
	}
	return identity.SHA256Hex(b), nil
}

// formWriter passes a try's answer to its client unless the answer comes
// in the other form: an arrival that joined a try in flight, or followed
// one on another gateway, which the first arrival asked for as JSON while
// this one asks for a stream, or the other way round. Then nothing is
// passed on, other says so, and the arrival is answered from the turn
// ledger once the try has ended (answerInForm). An error (any status but
// 200) is passed on as it is: it reads the same either way.
//
// Not safe for concurrent use (as no http.ResponseWriter is).
type formWriter struct {
	w      http.ResponseWriter
	header http.Header
	stream bool // the client asked for a stream
	wrote  bool
	other  bool
}

func newFormWriter(w http.ResponseWriter, stream bool) *formWriter {
	return &formWriter{w: w, header: http.Header{}, stream: stream}
}

// Header is the head being written, passed on with WriteHeader.
func (f *formWriter) Header() http.Header { return f.header }

// WriteHeader passes the head on, unless it starts an answer in the other
// form.
func (f *formWriter) WriteHeader(status int) {
	if f.wrote {
		return
	}
	f.wrote = true
	if sse := f.header.Get("Content-Type") == "text/event-stream"; status == http.StatusOK && sse != f.stream {
		f.other = true
		return
	}
	dst := f.w.Header()
	for k, v := range f.header {
		dst[k] = v
	}
	f.w.WriteHeader(status)
}

// Write passes b on, or drops it if the answer is in the other form.
func (f *formWriter) Write(b []byte) (int, error) {
	if !f.wrote {
		f.WriteHeader(http.StatusOK)
	}
	if f.other {
		return len(b), nil
	}
	return f.w.Write(b)
}

// FlushError flushes what was passed on (http.ResponseController calls it).
func (f *formWriter) FlushError() error {
	if !f.wrote || f.other {
		return nil
	}
	return http.NewResponseController(f.w).Flush()
}

// Unwrap is the client's writer (http.ResponseController's other calls).
func (f *formWriter) Unwrap() http.ResponseWriter { return f.w }

// answerInForm answers an arrival whose try answered in the other form,
// once the try has ended: the turn's answer in the form asked for, or what
// the turn ended with.
func (s *Service) answerInForm(w http.ResponseWriter, r *http.Request, t *policy.Tenant, f *formWriter, responseID string) {
	ctx := r.Context()
	turn, err := s.ledger.Turn(ctx, t.ID, responseID)
	if err == nil {
		turn, err = s.refreshTurn(ctx, turn)
	}
	if err != nil {
		s.storeError(w, err)
		return
	}
	dedup := f.header.Get("X-Oncegate-Dedup")
	if dedup == "" || dedup == "miss" {
		dedup = "joined"
	}
	switch {
	case turn.Deleted:
		s.turnError(w, deletedError(turn))
	case turn.State == ledger.TurnDone:
		s.replayTurn(w, r, turn, f.stream, dedup)
	case turn.State == ledger.TurnFailed:
		s.replayFailure(w, turn)
	case turn.State == ledger.TurnUnknown:
		s.turnError(w, api.Errorf(api.CodeOutcomeUnknown, "response %s: its try ended without knowing whether the provider answered; "+
			"send the turn again (the same Idempotency-Key, or the same body): it is reconciled, never sent blind", turn.ResponseID))
	default:
		e := api.Errorf(api.CodeConversationBusy, "response %s is still being answered; retry to read it", turn.ResponseID)
		e.RetryAfter = 1
		s.turnError(w, e)
	}
}
