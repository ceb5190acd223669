package httpfront

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
)

// What was wrong with a request net/http refused before any handler ran.
// net/http's own answer says no more than "400 Bad Request"; the gateway
// reads the request head again (shapedConn keeps a copy) and names the
// fault in it, so a client is told what to fix (docs/errors.md).

// cannedMessage is the message for net/http's own answer of status
// (its text after the status line) to the request head it refused.
func cannedMessage(status int, text string, head []byte) string {
	switch status {
	case http.StatusRequestHeaderFieldsTooLarge:
		return "the request's headers are too large"
	case http.StatusNotImplemented:
		return "unsupported Transfer-Encoding " + strconv.Quote(clip(headerValue(head, "Transfer-Encoding"))) +
			": a request body is sent with a Content-Length, or chunked"
	case http.StatusHTTPVersionNotSupported:
		return "unsupported protocol version " + strconv.Quote(clip(version(head))) + ": the gateway speaks HTTP/1.1"
	case http.StatusExpectationFailed:
		return "unsupported Expect " + strconv.Quote(clip(headerValue(head, "Expect"))) + ": the gateway understands only 100-continue"
	case http.StatusBadRequest:
		if fault := headFault(head); fault != "" {
			return fault
		}
		return "the request's line or headers are malformed (a header name must be a token; a header value may not hold a control character)"
	}
	return "the request could not be read (" + text + ")"
}

// headFault names what is wrong with a request head, or "" when nothing
// it checks is.
func headFault(head []byte) string {
	lines := strings.Split(string(head), "\n")
	for i := range lines {
		lines[i] = strings.TrimSuffix(lines[i], "\r")
	}
	if fault := requestLineFault(lines[0]); fault != "" {
		return fault
	}
	hosts := 0
	var lengths []string
	for _, l := range lines[1:] {
		if l == "" {
			break
		}
		name, value, fault := headerLine(l)
		if fault != "" {
			return fault
		}
		switch textproto.CanonicalMIMEHeaderKey(name) {
		case "Host":
			hosts++
		case "Content-Length":
			lengths = append(lengths, strings.TrimSpace(value))
		}
	}
	if fault := contentLengthFault(lengths); fault != "" {
		return fault
	}
	switch {
	case hosts > 1:
		return "more than one Host header"
	case hosts == 0 && strings.HasSuffix(lines[0], " HTTP/1.1"):
		return "missing Host header (HTTP/1.1 requires one)"
	}
	return ""
}

// requestLineFault checks "METHOD TARGET HTTP/1.x".
func requestLineFault(line string) string {
	parts := strings.Split(line, " ")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return fmt.Sprintf("malformed request line %q: want METHOD TARGET HTTP/1.1, separated by single spaces", clip(line))
	}
	method, target, proto := parts[0], parts[1], parts[2]
	if !isToken(method) {
		return fmt.Sprintf("invalid method %q", clip(method))
	}
	if _, _, ok := http.ParseHTTPVersion(proto); !ok {
		return fmt.Sprintf("malformed protocol version %q: want HTTP/1.1", clip(proto))
	}
	if method == http.MethodConnect {
		return ""
	}
	if _, err := url.ParseRequestURI(target); err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Sprintf("invalid request target %q: %v", clip(target), err)
	}
	return ""
}

// headerLine splits "Name: value" and names what is wrong with it.
func headerLine(l string) (name, value, fault string) {
	if l[0] == ' ' || l[0] == '\t' {
		return "", "", fmt.Sprintf("the header line %q begins with white space (a folded header line is not allowed)", clip(l))
	}
	name, value, ok := strings.Cut(l, ":")
	switch {
	case !ok:
		return "", "", fmt.Sprintf("the header line %q has no colon", clip(l))
	case !isToken(name):
		return "", "", fmt.Sprintf("invalid header name %q: a name is a token (letters, digits and !#$%%&'*+-.^_`|~; no spaces)", clip(name))
	}
	for i := 0; i < len(value); i++ {
		if b := value[i]; (b < 0x20 && b != '\t') || b == 0x7f {
			return "", "", fmt.Sprintf("the value of header %s holds a control character (byte 0x%02x); an Idempotency-Key is 1–255 visible ASCII characters", clip(name), b)
		}
	}
	return name, value, ""
}

// contentLengthFault checks a request's Content-Length headers: one whole
// number of bytes, 0 or more (repeated only with the same value).
func contentLengthFault(values []string) string {
	for _, v := range values {
		if _, err := strconv.ParseUint(v, 10, 63); err != nil {
			return fmt.Sprintf("invalid Content-Length %q: it must be a whole number of bytes, 0 or more", clip(v))
		}
	}
	for _, v := range values[min(1, len(values)):] {
		if v != values[0] {
			return fmt.Sprintf("invalid Content-Length: %d headers with different values (%s)", len(values), clip(strings.Join(values, ", ")))
		}
	}
	return ""
}

// headerValue is the first value of header name in a request head.
func headerValue(head []byte, name string) string {
	for _, l := range strings.Split(string(head), "\n")[1:] {
		k, v, ok := strings.Cut(strings.TrimSuffix(l, "\r"), ":")
		if ok && strings.EqualFold(strings.TrimSpace(k), name) {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// version is the protocol version of a request head's request line.
func version(head []byte) string {
	line, _, _ := strings.Cut(string(head), "\n")
	line = strings.TrimSuffix(line, "\r")
	return line[strings.LastIndexByte(line, ' ')+1:]
}

// isToken reports whether s is an HTTP token (RFC 9110, section 5.6.2).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b <= ' ' || b >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, b) >= 0 {
			return false
		}
	}
	return true
}

// clip bounds text quoted back to a client.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
