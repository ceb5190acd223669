package bedrock

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream/eventstreamapi"

	"github.com/oncegate/oncegate/internal/provider"
)

// MaxMessageBytes bounds one event-stream message of a ConverseStream
// answer (the framing allows 16 MiB; a Converse event is a delta).
const MaxMessageBytes = 1 << 20

// preludeLen is the event-stream prelude: total length, headers length
// and the prelude's CRC, four bytes each.
const preludeLen = 12

// ErrFraming is a ConverseStream whose framing or integrity is lost: a
// prelude or a message that fails its CRC, impossible lengths, headers
// that cannot be read. Nothing after it can be trusted, and skipping it
// would silently drop what it carried, so the stream is broken there
// (docs/streaming.md): before visible output the request fails over,
// after it the alias's stream.after_output decides.
var ErrFraming = errors.New("bedrock: event-stream framing lost")

// ErrTooLarge is a ConverseStream message longer than MaxMessageBytes: a
// protocol violation, which ends the stream.
var ErrTooLarge = errors.New("bedrock: event-stream message too large")

// MalformedError is one event-stream message that was read whole and
// passed its checksums but cannot be understood (an event whose JSON does
// not parse, a message type Converse does not send). The stream goes on:
// the message is skipped and counted as a protocol warning
// (docs/streaming.md), never forwarded.
type MalformedError struct{ Err error }

func (e *MalformedError) Error() string { return "bedrock: malformed stream event: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *MalformedError) Unwrap() error { return e.Err }

// Stream decodes a ConverseStream body (application/vnd.amazon.eventstream)
// into neutral events. It keeps state across one stream and is not safe
// for concurrent use.
type Stream struct {
	r       io.Reader
	dec     *eventstream.Decoder
	model   string
	frame   []byte
	payload []byte
	// tools maps a content block index to its tool call's ordinal.
	tools map[int]int
}

// NewStream reads a ConverseStream answer from r, from the route's model
// (Converse does not name it; EvStart does).
func NewStream(r io.Reader, model string) *Stream {
	return &Stream{r: r, dec: eventstream.NewDecoder(), model: model, tools: map[int]int{}}
}

// Next reads the next message and appends its neutral events to out.
// It returns io.EOF when the stream ended cleanly between messages, a
// *MalformedError for a message to skip (the stream goes on), and any
// other error — io.ErrUnexpectedEOF for a cut inside a message,
// ErrFraming (a failed CRC, prelude or message), ErrTooLarge, or the
// reader's own error — when the stream is broken.
// metadata, Converse's last event, ends with EvDone.
func (s *Stream) Next(out []provider.Event) ([]provider.Event, error) {
	var prelude [preludeLen]byte
	if _, err := io.ReadFull(s.r, prelude[:]); err != nil {
		return out, err // io.EOF only when no byte of a new message came
	}
	total := binary.BigEndian.Uint32(prelude[0:4])
	headers := binary.BigEndian.Uint32(prelude[4:8])
	if crc32.ChecksumIEEE(prelude[:8]) != binary.BigEndian.Uint32(prelude[8:12]) {
		return out, fmt.Errorf("%w: prelude checksum mismatch", ErrFraming)
	}
	if total > MaxMessageBytes {
		return out, fmt.Errorf("%w: %d bytes (limit %d)", ErrTooLarge, total, MaxMessageBytes)
	}
	if total < preludeLen+4 || headers > total-preludeLen-4 {
		return out, fmt.Errorf("%w: message length %d, headers %d", ErrFraming, total, headers)
	}
	s.frame = append(s.frame[:0], prelude[:]...)
	s.frame = append(s.frame, make([]byte, total-preludeLen)...)
	if _, err := io.ReadFull(s.r, s.frame[preludeLen:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return out, err
	}
	msg, err := s.dec.Decode(bytes.NewReader(s.frame), s.payload[:0])
	if err != nil {
		// The prelude passed; the message's CRC or its headers did not.
		return out, fmt.Errorf("%w: %w", ErrFraming, err)
	}
	s.payload = msg.Payload[:0]
	return s.message(&msg, out)
}

// message turns one decoded message into events.
func (s *Stream) message(msg *eventstream.Message, out []provider.Event) ([]provider.Event, error) {
	switch headerString(msg, eventstreamapi.MessageTypeHeader) {
	case eventstreamapi.EventMessageType:
		return s.event(headerString(msg, eventstreamapi.EventTypeHeader), msg.Payload, out)
	case eventstreamapi.ExceptionMessageType:
		return append(out, provider.Event{Kind: provider.EvError, Err: ParseException(headerString(msg, eventstreamapi.ExceptionTypeHeader), msg.Payload)}), nil
	case eventstreamapi.ErrorMessageType:
		e := &provider.UpstreamError{Type: sanitizeCode(headerString(msg, eventstreamapi.ErrorCodeHeader)),
			Message: clean(headerString(msg, eventstreamapi.ErrorMessageHeader))}
		e.Status = StatusOf(e.Type)
		return append(out, provider.Event{Kind: provider.EvError, Err: e}), nil
	}
	return out, &MalformedError{Err: fmt.Errorf("message type %q", headerString(msg, eventstreamapi.MessageTypeHeader))}
}

func headerString(msg *eventstream.Message, name string) string {
	if v := msg.Headers.Get(name); v != nil {
		if s, ok := v.(eventstream.StringValue); ok {
			return string(s)
		}
	}
	return ""
}

// streamEvent is the union of the ConverseStream event payloads oncegate
// reads.
type streamEvent struct {
	Role              string `json:"role"`
	ContentBlockIndex *int   `json:"contentBlockIndex"`
	Start             *struct {
		ToolUse *struct {
			ToolUseID string `json:"toolUseId"`
			Name      string `json:"name"`
		} `json:"toolUse"`
	} `json:"start"`
	Delta *struct {
		Text    *string `json:"text"`
		ToolUse *struct {
			Input string `json:"input"`
		} `json:"toolUse"`
		ReasoningContent *struct {
			Text            *string `json:"text"`
			Signature       *string `json:"signature"`
			RedactedContent *string `json:"redactedContent"`
		} `json:"reasoningContent"`
	} `json:"delta"`
	StopReason *string     `json:"stopReason"`
	Usage      *tokenUsage `json:"usage"`
}

// event decodes one event message. An event type Converse may add later
// carries nothing oncegate relays, and is passed over.
func (s *Stream) event(typ string, payload []byte, out []provider.Event) ([]provider.Event, error) {
	switch typ {
	case "messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata":
	default:
		return out, nil
	}
	var e streamEvent
	if err := json.Unmarshal(payload, &e); err != nil {
		return out, &MalformedError{Err: fmt.Errorf("%s: %w", typ, err)}
	}
	switch typ {
	case "messageStart":
		return append(out, provider.Event{Kind: provider.EvStart, Model: s.model}), nil
	case "contentBlockStart":
		if e.ContentBlockIndex == nil || e.Start == nil {
			return out, &MalformedError{Err: errors.New("contentBlockStart without its index or start")}
		}
		if tu := e.Start.ToolUse; tu != nil {
			if _, dup := s.tools[*e.ContentBlockIndex]; dup {
				return out, &MalformedError{Err: fmt.Errorf("contentBlockStart: block %d started twice", *e.ContentBlockIndex)}
			}
			n := len(s.tools)
			s.tools[*e.ContentBlockIndex] = n
			return append(out, provider.Event{Kind: provider.EvToolStart, ToolIndex: n, ToolID: tu.ToolUseID, ToolName: tu.Name}), nil
		}
		return out, nil
	case "contentBlockDelta":
		if e.ContentBlockIndex == nil || e.Delta == nil {
			return out, &MalformedError{Err: errors.New("contentBlockDelta without its index or delta")}
		}
		d := e.Delta
		switch {
		case d.Text != nil:
			return append(out, provider.Event{Kind: provider.EvText, Text: *d.Text}), nil
		case d.ToolUse != nil:
			n, ok := s.tools[*e.ContentBlockIndex]
			if !ok {
				return out, &MalformedError{Err: fmt.Errorf("contentBlockDelta: tool input for block %d, which started no tool call", *e.ContentBlockIndex)}
			}
			return append(out, provider.Event{Kind: provider.EvToolArgs, ToolIndex: n, Args: d.ToolUse.Input}), nil
		case d.ReasoningContent != nil:
			rc := d.ReasoningContent
			switch {
			case rc.Text != nil:
				return append(out, provider.Event{Kind: provider.EvThinking, Text: *rc.Text}), nil
			case rc.Signature != nil:
				return append(out, provider.Event{Kind: provider.EvSignature, Text: *rc.Signature}), nil
			case rc.RedactedContent != nil:
				return append(out, provider.Event{Kind: provider.EvRedactedThinking, Text: *rc.RedactedContent}), nil
			}
		}
		return out, nil // a delta of a kind oncegate does not relay (citations)
	case "contentBlockStop":
		return out, nil
	case "messageStop":
		if e.StopReason == nil {
			return out, &MalformedError{Err: errors.New("messageStop without stopReason")}
		}
		return append(out, provider.Event{Kind: provider.EvFinish, Finish: Finish(*e.StopReason)}), nil
	}
	// metadata: the usage of the whole answer, and the last event.
	if e.Usage == nil {
		return append(out, provider.Event{Kind: provider.EvDone}), nil
	}
	return append(out, provider.Event{Kind: provider.EvUsage, Usage: e.Usage.usage()}, provider.Event{Kind: provider.EvDone}), nil
}
