// Package litellm reads a LiteLLM proxy configuration and translates it
// into an oncegate one (docs/migrating-from-litellm.md). LiteLLM's file
// is someone else's format, so it is read leniently: a key this package
// does not know is carried into the output as a comment, never an error;
// only a value it needs and cannot read (a model that is not a string,
// fallbacks that are not a list of maps) is an error, naming the file,
// the position and the key.
package litellm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Error is a LiteLLM configuration that cannot be translated: where, and
// what was wrong.
type Error struct {
	File      string
	Line, Col int    // 0 when the problem has no one position
	Path      string // the key, e.g. model_list[2].litellm_params.model
	Msg       string
}

func (e *Error) Error() string {
	pos := e.File
	if e.Line > 0 {
		pos = fmt.Sprintf("%s:%d:%d", e.File, e.Line, e.Col)
	}
	if e.Path == "" {
		return pos + ": " + e.Msg
	}
	return pos + ": " + e.Path + ": " + e.Msg
}

// Config is a LiteLLM proxy configuration as far as the translation
// reads it. Its sections keep every key with its position, so that what
// has no equivalent can be named in the output.
type Config struct {
	File        string
	Deployments []Deployment
	Router      Section // router_settings
	Settings    Section // litellm_settings
	General     Section // general_settings
	// Others are the top-level sections the translation does not read
	// (environment_variables, …), by name.
	Others []string
}

// Deployment is one entry of model_list.
type Deployment struct {
	Index     int
	Line      int    // the entry's line
	Path      string // model_list[i]
	ModelName string // the group clients name
	Model     string // litellm_params.model, e.g. azure/gpt-4o-eu
	Params    Section
	Info      Section
	Entry     Section // the entry's own keys (rpm and tpm may sit here)
}

// Section is one mapping of the file: its keys in order, each with its
// node.
type Section struct {
	file  string
	Path  string
	Keys  []string
	nodes map[string]*yaml.Node
}

// Parse reads a LiteLLM proxy configuration; name is the file's name for
// errors.
func Parse(name string, data []byte) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &Error{File: name, Msg: "not YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	c := &Config{File: name}
	if len(doc.Content) == 0 {
		return nil, &Error{File: name, Msg: "empty: a LiteLLM config has a model_list"}
	}
	top, err := section(name, "", doc.Content[0])
	if err != nil {
		return nil, err
	}
	for _, k := range top.Keys {
		switch k {
		case "model_list", "router_settings", "litellm_settings", "general_settings":
		default:
			c.Others = append(c.Others, k)
		}
	}
	for _, s := range []struct {
		key string
		to  *Section
	}{{"router_settings", &c.Router}, {"litellm_settings", &c.Settings}, {"general_settings", &c.General}} {
		*s.to = Section{file: name, Path: s.key}
		if n := top.nodes[s.key]; n != nil && !isNull(n) {
			if *s.to, err = section(name, s.key, n); err != nil {
				return nil, err
			}
		}
	}
	list := top.nodes["model_list"]
	if list == nil || isNull(list) {
		return nil, &Error{File: name, Path: "model_list", Msg: "missing: the deployments are what is translated"}
	}
	if list.Kind != yaml.SequenceNode {
		return nil, errAt(name, list, "model_list", "want a list of deployments, found %s", kindName(list))
	}
	for i, n := range list.Content {
		d, err := deployment(name, i, deref(n))
		if err != nil {
			return nil, err
		}
		c.Deployments = append(c.Deployments, d)
	}
	return c, nil
}

func deployment(file string, i int, n *yaml.Node) (Deployment, error) {
	path := fmt.Sprintf("model_list[%d]", i)
	entry, err := section(file, path, n)
	if err != nil {
		return Deployment{}, err
	}
	d := Deployment{Index: i, Line: n.Line, Path: path, Entry: entry}
	name, ok, err := entry.String("model_name")
	if err != nil {
		return d, err
	}
	if !ok || name == "" {
		return d, errAt(file, n, path+".model_name", "missing: the name clients send as model")
	}
	d.ModelName = name
	d.Params = Section{file: file, Path: path + ".litellm_params"}
	if p := entry.nodes["litellm_params"]; p != nil {
		if d.Params, err = section(file, path+".litellm_params", p); err != nil {
			return d, err
		}
	}
	d.Info = Section{file: file, Path: path + ".model_info"}
	if p := entry.nodes["model_info"]; p != nil && !isNull(p) {
		if d.Info, err = section(file, path+".model_info", p); err != nil {
			return d, err
		}
	}
	model, ok, err := d.Params.String("model")
	if err != nil {
		return d, err
	}
	if !ok || model == "" {
		return d, errAt(file, n, path+".litellm_params.model", "missing: the provider/model a deployment calls")
	}
	d.Model = model
	return d, nil
}

// deref follows a YAML alias (*name) to its anchored node, as far as a
// chain of them goes (bounded: a cycle is not followed forever).
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 32; i++ {
		n = n.Alias
	}
	return n
}

func section(file, path string, n *yaml.Node) (Section, error) {
	s := Section{file: file, Path: path, nodes: map[string]*yaml.Node{}}
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		return s, errAt(file, n, cmpPath(path, "(top level)"), "want a mapping, found %s", kindName(n))
	}
	n = deref(n)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		if k.Value == "<<" && k.Tag == "!!merge" && v.Kind == yaml.MappingNode {
			// A merge key: the anchored mapping's keys, unless set here.
			merged, err := section(file, path, v)
			if err != nil {
				return s, err
			}
			for _, mk := range merged.Keys {
				if _, set := s.nodes[mk]; !set {
					s.Keys = append(s.Keys, mk)
					s.nodes[mk] = merged.nodes[mk]
				}
			}
			continue
		}
		if k.Kind != yaml.ScalarNode {
			return s, errAt(file, k, cmpPath(path, "(top level)"), "want a key, found %s", kindName(k))
		}
		if _, dup := s.nodes[k.Value]; dup {
			return s, errAt(file, k, s.key(k.Value), "set twice")
		}
		s.Keys = append(s.Keys, k.Value)
		s.nodes[k.Value] = v
	}
	return s, nil
}

func cmpPath(path, orElse string) string {
	if path == "" {
		return orElse
	}
	return path
}

// key is the path of one of the section's keys.
func (s Section) key(k string) string {
	if s.Path == "" {
		return k
	}
	return s.Path + "." + k
}

// Has reports whether the section sets k (to anything but null).
func (s Section) Has(k string) bool { n := s.nodes[k]; return n != nil && !isNull(n) }

// Pos is where key k's value is, "file:line:col", for comments.
func (s Section) Pos(k string) string {
	if n := s.nodes[k]; n != nil {
		return fmt.Sprintf("%s:%d", s.file, n.Line)
	}
	return s.file
}

// Raw is key k's value as written, on one line, for comments.
func (s Section) Raw(k string) string {
	n := s.nodes[k]
	if n == nil {
		return ""
	}
	if n.Kind == yaml.ScalarNode {
		return n.Value
	}
	out, err := yaml.Marshal(n)
	if err != nil {
		return "…"
	}
	n2 := &yaml.Node{}
	if yaml.Unmarshal(out, n2) == nil && len(n2.Content) > 0 {
		setFlow(n2.Content[0])
		if b, err := yaml.Marshal(n2.Content[0]); err == nil {
			out = b
		}
	}
	return strings.TrimSpace(string(out))
}

func setFlow(n *yaml.Node) {
	n.Style = yaml.FlowStyle
	for _, c := range n.Content {
		setFlow(c)
	}
}

// String reads key k as a string (a number is read as written).
func (s Section) String(k string) (string, bool, error) {
	n := s.nodes[k]
	if n == nil || isNull(n) {
		return "", false, nil
	}
	if n.Kind != yaml.ScalarNode {
		return "", false, errAt(s.file, n, s.key(k), "want a string, found %s", kindName(n))
	}
	if name, ok := strings.CutPrefix(n.Value, "os.environ/"); ok && !isEnvName(strings.TrimSpace(name)) {
		return "", false, errAt(s.file, n, s.key(k), "os.environ/%s: want a variable's name (letters, digits and _, not starting with a digit)", name)
	}
	return n.Value, true, nil
}

// isEnvName reports whether name can name an environment variable as a
// shell sets one, and so can be written unquoted in the translation.
func isEnvName(name string) bool {
	for i, c := range name {
		if c != '_' && (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return name != ""
}

// Number reads key k as a number (a quoted number is read too, as
// LiteLLM's Python does for most of its settings).
func (s Section) Number(k string) (float64, bool, error) {
	v, ok, err := s.String(k)
	if !ok || err != nil {
		return 0, ok, err
	}
	f, perr := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if perr != nil || f != f {
		return 0, false, errAt(s.file, s.nodes[k], s.key(k), "want a number, found %q", v)
	}
	return f, true, nil
}

// Bool reads key k as a boolean ("true"/"false" in any case, as Python's
// YAML reads them).
func (s Section) Bool(k string) (bool, bool, error) {
	v, ok, err := s.String(k)
	if !ok || err != nil {
		return false, ok, err
	}
	switch strings.ToLower(v) {
	case "true", "yes", "on":
		return true, true, nil
	case "false", "no", "off":
		return false, true, nil
	}
	return false, false, errAt(s.file, s.nodes[k], s.key(k), "want true or false, found %q", v)
}

// Strings reads key k as a list of strings; a single string is a list of
// one.
func (s Section) Strings(k string) ([]string, error) {
	n := s.nodes[k]
	if n == nil || isNull(n) {
		return nil, nil
	}
	return stringList(s.file, s.key(k), n)
}

func stringList(file, path string, n *yaml.Node) ([]string, error) {
	switch n = deref(n); n.Kind {
	case yaml.ScalarNode:
		return []string{n.Value}, nil
	case yaml.SequenceNode:
		out := make([]string, 0, len(n.Content))
		for i, e := range n.Content {
			if e = deref(e); e.Kind != yaml.ScalarNode {
				return nil, errAt(file, e, fmt.Sprintf("%s[%d]", path, i), "want a string, found %s", kindName(e))
			}
			out = append(out, e.Value)
		}
		return out, nil
	}
	return nil, errAt(file, n, path, "want a list of strings, found %s", kindName(n))
}

// Fallback is one entry of fallbacks: when every deployment of From
// failed, the groups To, in order.
type Fallback struct {
	From string
	To   []string
	Path string
}

// Fallbacks reads key k as LiteLLM's fallbacks: a list of one-key maps
// [{gpt-4o: [claude]}] (a map of several keys is read as several).
func (s Section) Fallbacks(k string) ([]Fallback, error) {
	n := s.nodes[k]
	if n == nil || isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, errAt(s.file, n, s.key(k), "want a list of {group: [fallback groups]}, found %s", kindName(n))
	}
	var out []Fallback
	for i, e := range n.Content {
		e = deref(e)
		path := fmt.Sprintf("%s[%d]", s.key(k), i)
		if e.Kind != yaml.MappingNode {
			return nil, errAt(s.file, e, path, "want {group: [fallback groups]}, found %s", kindName(e))
		}
		for j := 0; j+1 < len(e.Content); j += 2 {
			from := e.Content[j]
			if from.Kind != yaml.ScalarNode {
				return nil, errAt(s.file, from, path, "want a group name, found %s", kindName(from))
			}
			to, err := stringList(s.file, path+"."+from.Value, e.Content[j+1])
			if err != nil {
				return nil, err
			}
			out = append(out, Fallback{From: from.Value, To: to, Path: path})
		}
	}
	return out, nil
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "nothing"
}

func errAt(file string, n *yaml.Node, path, format string, args ...any) *Error {
	return &Error{File: file, Line: n.Line, Col: n.Column, Path: path, Msg: fmt.Sprintf(format, args...)}
}

// IsError reports whether err is a translation problem with the input
// (an *Error), as opposed to one reading it.
func IsError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}
