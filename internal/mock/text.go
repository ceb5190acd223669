package mock

import (
	"crypto/sha256"
	"encoding/binary"
	"strings"
)

var words = strings.Fields(`the gateway keeps one logical request per user action and every attempt is
counted once retries belong to a single owner so the answer you read is never restarted with a different
opening line budgets bound attempts cost and time while receipts record what each provider was paid
streams resume from the last visible token instead of generating a second answer that repeats itself`)

// promptKey identifies a prompt for text generation: the seed, the system
// prompt and every message except a trailing assistant prefix, so that a
// continuation request draws the same answer as the request it continues.
func promptKey(seed int64, a *ask) uint64 {
	h := sha256.New()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(seed))
	h.Write(b[:])
	h.Write([]byte(a.system))
	turns := a.turns
	if a.continuation() {
		turns = turns[:len(turns)-1]
	}
	for _, t := range turns {
		h.Write([]byte{0})
		h.Write([]byte(t.role))
		h.Write([]byte{0})
		h.Write([]byte(t.text))
		h.Write([]byte(t.calls))
	}
	return binary.BigEndian.Uint64(h.Sum(nil))
}

// answerTokens is the deterministic answer for a prompt key: n tokens, each
// one chunk of a stream. Words carry their leading space; every ninth ends
// a sentence and every twentieth a paragraph, so that some tokens end in
// whitespace (the case a resume must not double).
func answerTokens(key uint64, n int) []string {
	out := make([]string, 0, n)
	capital := true
	for i := 0; i < n; i++ {
		key = key*6364136223846793005 + 1442695040888963407 // PCG-style LCG step
		w := words[(key>>33)%uint64(len(words))]
		if capital {
			w = strings.ToUpper(w[:1]) + w[1:]
		}
		if i > 0 && !strings.HasSuffix(out[i-1], "\n") {
			w = " " + w
		}
		capital = false
		switch {
		case i%20 == 19:
			w += ".\n\n"
			capital = true
		case i%9 == 8:
			w += "."
			capital = true
		}
		out = append(out, w)
	}
	return out
}

// AnswerTo returns the full text the mock answers, with the given seed and
// length, to a conversation of user and assistant texts (alternating,
// starting with the user's): the text a client must read, however many
// attempts it took and whichever provider type served it.
func AnswerTo(seed int64, system string, texts []string, n int) string {
	a := &ask{system: system}
	for i, t := range texts {
		role := roleUser
		if i%2 == 1 {
			role = roleAssistant
		}
		a.turns = append(a.turns, turn{role: role, text: t})
	}
	return strings.Join(answerTokens(promptKey(seed, a), n), "")
}

// continueTokens returns the tokens that follow prefix in the full answer:
// the remainder of the token the prefix ends inside (typically whitespace
// the caller stripped), then the whole tokens after it. ok is false when
// the prefix is not a prefix of the answer.
func continueTokens(full []string, prefix string) (rest []string, ok bool) {
	pos := 0
	for i, t := range full {
		end := pos + len(t)
		if end > len(prefix) {
			joined := strings.Join(full[:i+1], "")
			if !strings.HasPrefix(joined, prefix) {
				return nil, false
			}
			if tail := joined[len(prefix):]; tail != "" {
				rest = append(rest, tail)
			}
			return append(rest, full[i+1:]...), true
		}
		pos = end
	}
	return nil, strings.Join(full, "") == prefix
}

// AnswerFor is the answer to a single user message: what a client must
// read for that prompt, however many attempts it took.
func AnswerFor(seed int64, userText string, n int) string {
	return AnswerTo(seed, "", []string{userText}, n)
}
