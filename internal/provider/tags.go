package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Chargeback tags (docs/spend.md): a request carries at most MaxTags,
// each at most MaxTagBytes, from the X-Oncegate-Tags header and the
// body's metadata.tags, which LiteLLM clients send. No provider has a
// field for them, so the body's are taken out before any route sees it.
const (
	MaxTags     = 16
	MaxTagBytes = 64
)

// takeTags takes metadata.tags out of a request body: the body without
// them (and without metadata, when tags was all it held), and the tags.
// A tags member that is not a list of strings is an invalid request
// naming metadata.tags; the tags themselves are checked by Tags.
func takeTags(body []byte) ([]byte, []string, error) {
	if !bytes.Contains(body, []byte(`metadata`)) && !bytes.Contains(body, []byte(`\u`)) {
		return body, nil, nil // only a \u escape could spell it otherwise
	}
	top, err := topLevelMembers(body)
	if err != nil {
		return body, nil, nil // not an object: the parser says what is wrong
	}
	meta, ok := top["metadata"]
	if !ok || bytes.Equal(bytes.TrimSpace(meta), []byte("null")) {
		return body, nil, nil
	}
	members, err := topLevelMembers(meta)
	if err != nil || bytes.TrimSpace(meta)[0] != '{' {
		return body, nil, nil // not an object: the parser says what is wrong
	}
	raw, ok := members["tags"]
	if !ok {
		return body, nil, nil
	}
	var tags []string
	if err := json.Unmarshal(raw, &tags); err != nil {
		return nil, nil, invalid("metadata.tags", "metadata.tags must be a list of strings, found %s", truncateRaw(raw))
	}
	edit := MemberEdit{Key: "metadata"} // none left: metadata goes
	if len(members) > 1 {
		rest, ok := ReplaceMembers(meta, MemberEdit{Key: "tags"})
		if !ok {
			delete(members, "tags")
			rest = encodeMembers(members)
		}
		edit.Value = rest
	}
	if out, ok := ReplaceMembers(body, edit); ok {
		return out, tags, nil
	}
	if edit.Value == nil {
		delete(top, "metadata")
	} else {
		top["metadata"] = edit.Value
	}
	return encodeMembers(top), tags, nil
}

// truncateRaw is a JSON value short enough for an error message.
func truncateRaw(raw []byte) string {
	s := strings.TrimSpace(string(raw))
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return s
}

// TagsOfHeader reads X-Oncegate-Tags values: comma-separated tags,
// surrounding spaces trimmed, empty items ignored.
func TagsOfHeader(values []string) []string {
	var out []string
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				out = append(out, t)
			}
		}
	}
	return out
}

// Tags merges the header's tags and the body's, in that order and each
// once, and checks them: at most MaxTags, each 1 to MaxTagBytes bytes of
// printable UTF-8. A rejection is an invalid request naming where the
// offending tag came from.
func Tags(header, body []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, src := range []struct {
		param string
		tags  []string
	}{{"X-Oncegate-Tags", header}, {"metadata.tags", body}} {
		for _, t := range src.tags {
			if err := checkTag(t); err != nil {
				return nil, invalid(src.param, "tag %q %v", truncateTag(t), err)
			}
			if !seen[t] {
				seen[t] = true
				out = append(out, t)
			}
		}
		if len(out) > MaxTags {
			return nil, invalid(src.param, "at most %d tags, found %d (X-Oncegate-Tags and metadata.tags together)", MaxTags, len(out))
		}
	}
	return out, nil
}

func checkTag(t string) error {
	switch {
	case t == "":
		return fmt.Errorf("is empty")
	case len(t) > MaxTagBytes:
		return fmt.Errorf("is %d bytes, more than %d", len(t), MaxTagBytes)
	case !utf8.ValidString(t):
		return fmt.Errorf("is not valid UTF-8")
	}
	for _, r := range t {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("holds %U, which is not printable", r)
		}
	}
	return nil
}

// truncateTag is a tag short enough for an error message.
func truncateTag(t string) string {
	if len(t) <= MaxTagBytes {
		return t
	}
	cut := MaxTagBytes
	for cut > 0 && !utf8.RuneStart(t[cut]) {
		cut--
	}
	return t[:cut] + "…"
}
