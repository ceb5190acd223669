package conversation

import (
	"net/http"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/provider"
)

// A done or failed turn answered again, from the turn ledger.

// replayFailure answers with the error a failed turn ended with.
func (s *Service) replayFailure(w http.ResponseWriter, turn *ledger.Turn) {
	if turn.Status == 0 || len(turn.Response) == 0 {
		s.turnError(w, api.Errorf(api.CodeOutcomeUnknown, "response %s ended without an answer", turn.ResponseID))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("x-should-retry", "false")
	api.SetIDHeaders(h, turn.RequestID, 0)
	w.WriteHeader(turn.Status)
	_, _ = w.Write(turn.Response)
}

// replayTurn answers an arrival for a done turn with its response, in
// the form asked for: the object, or a stream of it (the try's own bytes
// when it was asked for in the same form). dedup labels the answer.
func (s *Service) replayTurn(w http.ResponseWriter, r *http.Request, turn *ledger.Turn, stream bool, dedup string) {
	if turn.Deleted {
		s.turnError(w, deletedError(turn))
		return
	}
	h := w.Header()
	api.SetIDHeaders(h, turn.RequestID, 0)
	h.Set("X-Oncegate-Dedup", dedup)
	if rec, err := s.ledger.Get(r.Context(), turnIdentity(turn)); err == nil && rec.Response != nil && rec.State == ledger.Succeeded &&
		(rec.Response.ContentType == "text/event-stream") == stream {
		h.Set("Content-Type", rec.Response.ContentType)
		api.SetIDHeaders(h, rec.RequestID, rec.Response.Attempts)
		if rec.Response.Route != "" {
			h.Set("X-Oncegate-Route", rec.Response.Route)
		}
		w.WriteHeader(rec.Response.Status)
		_, _ = w.Write(rec.Response.Body)
		return
	}
	if !stream {
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(turn.Response)
		return
	}
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(provider.StreamResponseObject(turn.Response))
}
