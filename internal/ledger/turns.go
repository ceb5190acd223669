package ledger

import (
	"context"
	"strconv"
	"time"
)

// TurnState is a conversation turn's state in the turn ledger
// (docs/conversations.md).
type TurnState string

// The turn states. A pending turn has a try in flight; done has its
// answer committed; unknown ended ambiguously and must be reconciled
// before it is tried again; failed committed nothing.
const (
	TurnPending TurnState = "pending"
	TurnDone    TurnState = "done"
	TurnUnknown TurnState = "unknown"
	TurnFailed  TurnState = "failed"
)

// Live reports whether a turn in state s may hold an answer: every
// state but failed.
func (s TurnState) Live() bool { return s != TurnFailed }

// InFlight reports whether a turn in state s has not settled: its try is
// running (pending), or may have been committed without the gateway
// knowing (unknown). An arrival that repeats such a turn continues it.
func (s TurnState) InFlight() bool { return s == TurnPending || s == TurnUnknown }

// Turn is one turn of a stored conversation: the user's input and the
// assistant's answer to it, under one response id.
type Turn struct {
	// ResponseID is the response id the client sees ("resp_…").
	ResponseID string
	Tenant     string
	// KeyID is the virtual key that made the turn; "" for the tenant's
	// keys from the configuration (and for turns stored before turns
	// recorded their key). A virtual key reads, continues and deletes
	// only its own turns (docs/keys-and-teams.md); BeginTurn writes it, and no
	// update changes it.
	KeyID string
	// Conversation is the response id of the conversation's first turn.
	Conversation string
	// Parent is the previous turn's response id; "" for a first turn.
	Parent string
	// Depth is the turn's place in its conversation, from 1.
	Depth int
	// Branch is the turn's place among its parent's continuations, from
	// 0, in the order they were begun (BeginTurn numbers it). A response
	// may be continued any number of times (a regenerated answer, an
	// edited question); on a stateful route only branch 0 goes on in
	// the parent's upstream conversation.
	Branch int
	// KeyDigest names a keyed turn (its Idempotency-Key's digest); ""
	// for a keyless one.
	KeyDigest string
	// Fingerprint identifies the request body (with its parent, without
	// its stream flag), so a retry finds the turn it repeats; "" for a
	// keyless turn that joins nothing (X-Oncegate-Join: off).
	Fingerprint   string
	RequestSHA256 string
	State         TurnState
	// Try counts the logical requests the turn has run (each one its own
	// receipt); RequestID is the latest one's. Ambiguous counts the tries
	// that ended without knowing whether the answer was committed.
	Try       int
	RequestID string
	Ambiguous int
	// Input is the turn's input items (JSON array) and Request the body
	// the client sent.
	Input   []byte
	Request []byte
	// Response is the response object (done), or the error body a
	// failed turn answers with, under Status.
	Response []byte
	Status   int
	// Upstream is a stateful route's record of the turn (JSON): the
	// upstream conversation and response ids.
	Upstream []byte
	// Deleted: the client deleted the response; it is no longer served,
	// replayed or continued.
	Deleted   bool
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Orphan is a generation an upstream committed for a turn besides the one
// the conversation kept: recorded so its cost is attributable.
type Orphan struct {
	Tenant       string
	Conversation string
	ResponseID   string // the turn it was generated for
	UpstreamID   string
	Route        string
	InputTokens  int64
	OutputTokens int64
	Cost         int64 // nano-USD
	At           time.Time
}

// TurnStore is the turn ledger: conversations a gateway holds for
// /v1/responses, one row per turn.
type TurnStore interface {
	// BeginTurn writes t, pending, in one durable commit, numbering its
	// branch (t.Branch: how many continuations of t.Parent were begun
	// before it), unless the turn exists already: the turn of t.Tenant
	// with t.KeyDigest (when set), or, for a keyless t with a
	// fingerprint, an undeleted keyless turn in flight (pending or
	// unknown) with the same fingerprint and parent. Then it returns
	// that turn and created false, writing nothing. So a retry never
	// appends a copy, while a parent may have many continuations.
	BeginTurn(ctx context.Context, t *Turn) (existing *Turn, created bool, err error)
	// UpdateTurn writes t's state, try, request id, ambiguous count,
	// response, status, upstream record and deleted flag, if the stored
	// turn is still in state from at try fromTry; false if it moved on.
	UpdateTurn(ctx context.Context, t *Turn, from TurnState, fromTry int) (bool, error)
	// Turn returns a tenant's turn by response id, or ErrNotFound.
	Turn(ctx context.Context, tenant, responseID string) (*Turn, error)
	// TurnByFingerprint returns the newest undeleted keyless turn of
	// tenant with that fingerprint and parent, or ErrNotFound.
	TurnByFingerprint(ctx context.Context, tenant, fingerprint, parent string) (*Turn, error)
	// DeleteTurn marks t deleted, if the stored turn is still in state
	// from at try fromTry (false if it moved on), and in the same commit
	// deletes the finished request records of its tries (identities
	// TryIdentity(t.ResponseID, 1 … t.Try)), whose stored answers would
	// replay it; their events and receipts stay.
	DeleteTurn(ctx context.Context, t *Turn, from TurnState, fromTry int) (bool, error)
	// ConversationTurns returns every turn of a conversation (failed
	// ones too), by depth then creation.
	ConversationTurns(ctx context.Context, tenant, conversation string) ([]*Turn, error)
	// AddOrphan records an orphaned generation once, and charges its Cost
	// to the tenant's spend for the UTC day of its At in the same commit
	// (an orphan is spend: the provider billed it). A record of the same
	// tenant, conversation and upstream id exists already, it writes
	// nothing and returns false.
	AddOrphan(ctx context.Context, o *Orphan) (bool, error)
	// Orphans lists a conversation's orphans, oldest first.
	Orphans(ctx context.Context, tenant, conversation string) ([]*Orphan, error)
}

// TryIdentity is the request record identity of a turn's try: each try
// is a logical request of its own, with its own receipt.
func TryIdentity(responseID string, try int) string {
	return "t:" + responseID + "#" + strconv.Itoa(try)
}

// TryIdentities are the identities of every try of t.
func TryIdentities(t *Turn) []string {
	out := make([]string, 0, t.Try)
	for n := 1; n <= t.Try; n++ {
		out = append(out, TryIdentity(t.ResponseID, n))
	}
	return out
}

// Chain returns the turns from a conversation's first turn to the turn
// responseID, in order, from every turn of the conversation.
func Chain(turns []*Turn, responseID string) []*Turn {
	byID := make(map[string]*Turn, len(turns))
	for _, t := range turns {
		byID[t.ResponseID] = t
	}
	var chain []*Turn
	for id := responseID; id != ""; {
		t, ok := byID[id]
		if !ok || len(chain) > len(turns) {
			break
		}
		chain = append(chain, t)
		id = t.Parent
	}
	for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
		chain[i], chain[j] = chain[j], chain[i]
	}
	return chain
}
