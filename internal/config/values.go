package config

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Values is a mapping of names to values whose each value is a plain
// string, {env: NAME} (read from the environment) or {file: PATH} (read
// from a file, trimmed) — a provider's extra headers and query
// parameters. The environment and files are read by ResolveSecrets, at
// start and on every reload; their values are never logged.
type Values []Value

// Value is one entry of Values: exactly one of Literal, Env and File.
type Value struct {
	Name    string
	Literal string
	Env     string // the variable's name, when from the environment
	File    string // the file's name, when from a file
	// Secret: the value comes from the environment or a file, and is
	// shown by its source only.
	Secret bool
	Pos    Pos
}

// Source describes where v's value comes from, never the value of a
// secret: "env NAME", "file PATH" or the literal text.
func (v Value) Source() string {
	switch {
	case v.Env != "":
		return "env " + v.Env
	case v.File != "":
		return "file " + v.File
	}
	return v.Literal
}

func (vs *Values) decodeNode(n *yaml.Node, path string, fail func(n *yaml.Node, path, format string, args ...any)) {
	if n.Kind != yaml.MappingNode {
		fail(n, path, "want a mapping of names to values, found %s", kindName(n))
		return
	}
	seen := map[string]bool{}
	out := make(Values, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			fail(k, path, "names must be plain, non-empty strings")
			continue
		}
		vpath := path + "." + k.Value
		if seen[k.Value] {
			fail(k, vpath, "duplicate name %q", k.Value)
			continue
		}
		seen[k.Value] = true
		v := Value{Name: k.Value, Pos: Pos{val.Line, val.Column}}
		switch {
		case val.Kind == yaml.ScalarNode && val.Tag == "!!str":
			v.Literal = val.Value
		case val.Kind == yaml.ScalarNode:
			fail(val, vpath, "want a string, {env: NAME} or {file: PATH}, found %s %q (quote it to use it as text)", tagName(val.Tag), val.Value)
			continue
		case val.Kind == yaml.MappingNode && len(val.Content) == 2 && val.Content[1].Kind == yaml.ScalarNode && val.Content[1].Value != "":
			switch from := val.Content[0].Value; from {
			case "env":
				v.Env, v.Secret = val.Content[1].Value, true
			case "file":
				v.File, v.Secret = val.Content[1].Value, true
			default:
				fail(val.Content[0], vpath, "unknown source %q: want {env: NAME} or {file: PATH}", from)
				continue
			}
		default:
			fail(val, vpath, "want a string, {env: NAME} or {file: PATH}, found %s", describeValue(val))
			continue
		}
		out = append(out, v)
	}
	*vs = out
}

// describeValue names a YAML node's shape for an error.
func describeValue(n *yaml.Node) string {
	if n.Kind == yaml.MappingNode {
		return fmt.Sprintf("a mapping of %d keys", len(n.Content)/2)
	}
	return kindName(n)
}
