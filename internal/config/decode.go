package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Pos is a position in a configuration file, 1-based.
type Pos struct {
	Line   int
	Column int
}

func (p Pos) String() string { return fmt.Sprintf("%d:%d", p.Line, p.Column) }

// Error is one problem found in a configuration file, with where it is and
// which field it concerns.
type Error struct {
	File string
	Pos  Pos
	Path string // field path, e.g. "routes[1].max_attempts"; empty for the whole file
	Msg  string
}

func (e *Error) Error() string {
	loc := e.File
	if e.Pos.Line > 0 {
		loc = fmt.Sprintf("%s:%d:%d", e.File, e.Pos.Line, e.Pos.Column)
	}
	if e.Path == "" {
		return loc + ": " + e.Msg
	}
	return loc + ": " + e.Path + ": " + e.Msg
}

// Errors is every problem found in one file. It is returned whole so that
// a user fixes all of them in one pass.
type Errors []*Error

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// scalarDecoder is implemented by leaf types that read themselves from a
// YAML scalar (Duration).
type scalarDecoder interface {
	decodeScalar(tag, value string) error
}

// nodeDecoder is implemented by types that read themselves from a YAML
// node of more than one shape (RouteTier: a name, or a list of names);
// fail reports a problem at a node.
type nodeDecoder interface {
	decodeNode(n *yaml.Node, path string, fail func(n *yaml.Node, path, format string, args ...any))
}

// maxNodes bounds how many YAML nodes one decode visits, so that alias
// expansion ("billion laughs") cannot exhaust memory or time.
const maxNodes = 100_000

type decoder struct {
	file    string
	errs    Errors
	present map[string]Pos
	visited int
}

func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Pos: Pos{n.Line, n.Column}, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// decode reads n into v (addressable), recording every field path it sets.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	d.visited++
	if d.visited > maxNodes {
		if d.visited == maxNodes+1 {
			d.fail(n, path, "document too large or too many alias expansions (more than %d nodes)", maxNodes)
		}
		return
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			d.fail(n, path, "unresolved alias")
			return
		}
		d.decode(n.Alias, v, path)
		return
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an explicit null leaves the default in place
	}
	d.present[path] = Pos{n.Line, n.Column}
	if nd, ok := v.Addr().Interface().(nodeDecoder); ok {
		nd.decodeNode(n, path, d.fail)
		return
	}
	if sd, ok := v.Addr().Interface().(scalarDecoder); ok {
		if n.Kind != yaml.ScalarNode {
			d.fail(n, path, "want a scalar, found %s", kindName(n))
			return
		}
		if err := sd.decodeScalar(n.Tag, n.Value); err != nil {
			d.fail(n, path, "%v", err)
		}
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		d.decodeSlice(n, v, path)
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
			setDefaults(v.Elem())
		}
		d.decode(n, v.Elem(), path)
	default:
		d.decodeScalar(n, v, path)
	}
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want a mapping, found %s", kindName(n))
		return
	}
	fields := structFields(v.Type())
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.fail(k, path, "mapping keys must be plain names")
			continue
		}
		name := k.Value
		if name == "<<" {
			d.fail(k, path, "merge keys (<<) are not supported; write the fields out")
			continue
		}
		fpath := joinPath(path, name)
		if seen[name] {
			d.fail(k, fpath, "duplicate field %q", name)
			continue
		}
		seen[name] = true
		idx, ok := fields[name]
		if !ok {
			d.fail(k, fpath, "unknown field %q%s", name, suggest(name, fields))
			continue
		}
		d.decode(val, v.Field(idx), fpath)
	}
	for _, name := range sortedKeys(fields) {
		f := v.Type().Field(fields[name])
		if f.Tag.Get("required") == "true" {
			if _, ok := d.present[joinPath(path, name)]; !ok {
				d.fail(n, joinPath(path, name), "missing required field %q", name)
			}
		}
	}
}

func (d *decoder) decodeSlice(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "want a list, found %s", kindName(n))
		return
	}
	out := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		setDefaults(out.Index(i))
		d.decode(item, out.Index(i), fmt.Sprintf("%s[%d]", path, i))
	}
	v.Set(out)
}

func (d *decoder) decodeScalar(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "want %s, found %s", typeName(v.Kind()), kindName(n))
		return
	}
	switch v.Kind() {
	case reflect.String:
		if n.Tag != "!!str" && n.Tag != "!!timestamp" {
			d.fail(n, path, "want a string, found %s %q (quote it to use it as text)", tagName(n.Tag), n.Value)
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		if n.Tag != "!!bool" {
			d.fail(n, path, "want true or false, found %s %q", tagName(n.Tag), n.Value)
			return
		}
		var b bool
		if err := n.Decode(&b); err != nil {
			d.fail(n, path, "want true or false: %v", err)
			return
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64, reflect.Int32:
		if n.Tag != "!!int" {
			d.fail(n, path, "want an integer, found %s %q", tagName(n.Tag), n.Value)
			return
		}
		var i int64
		if err := n.Decode(&i); err != nil || v.OverflowInt(i) {
			d.fail(n, path, "integer %q out of range", n.Value)
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		if n.Tag != "!!int" && n.Tag != "!!float" {
			d.fail(n, path, "want a number, found %s %q", tagName(n.Tag), n.Value)
			return
		}
		var f float64
		if err := n.Decode(&f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.fail(n, path, "want a finite number, found %q", n.Value)
			return
		}
		v.SetFloat(f)
	default:
		d.fail(n, path, "unsupported field type %s", v.Type())
	}
}

// setDefaults fills every field of a struct that carries a `default` tag,
// recursing into nested structs. It runs before decoding, so values in the
// file override defaults and absent sections still get them.
func setDefaults(v reflect.Value) {
	if v.Kind() != reflect.Struct {
		return
	}
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f, fv := t.Field(i), v.Field(i)
		if !f.IsExported() {
			continue
		}
		if def, ok := f.Tag.Lookup("default"); ok {
			mustSetDefault(fv, def, t.Name()+"."+f.Name)
			continue
		}
		if fv.Kind() == reflect.Struct {
			setDefaults(fv)
		}
	}
}

func mustSetDefault(v reflect.Value, def, name string) {
	var err error
	if sd, ok := v.Addr().Interface().(scalarDecoder); ok {
		err = sd.decodeScalar("!!str", def)
	} else {
		switch v.Kind() {
		case reflect.String:
			v.SetString(def)
		case reflect.Bool:
			var b bool
			b, err = strconv.ParseBool(def)
			v.SetBool(b)
		case reflect.Int, reflect.Int64, reflect.Int32:
			var i int64
			i, err = strconv.ParseInt(def, 10, 64)
			v.SetInt(i)
		case reflect.Float64:
			var f float64
			f, err = strconv.ParseFloat(def, 64)
			v.SetFloat(f)
		case reflect.Slice:
			if v.Type().Elem().Kind() != reflect.String {
				err = errors.New("only string lists take defaults")
				break
			}
			parts := strings.Split(def, ",")
			v.Set(reflect.ValueOf(parts).Convert(v.Type()))
		default:
			err = fmt.Errorf("no default for %s", v.Kind())
		}
	}
	if err != nil {
		panic(fmt.Sprintf("config: bad default tag on %s: %v", name, err)) // a programming error, caught by tests
	}
}

// structFields maps yaml names to field indexes. Configs are small and read
// once, so it is not cached.
func structFields(t reflect.Type) map[string]int {
	m := map[string]int{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "-" || name == "" {
			continue
		}
		m[name] = i
	}
	return m
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// suggest names the closest known field when the unknown one looks like a
// typo, so that "max_attempt" points at "max_attempts".
func suggest(name string, fields map[string]int) string {
	best, bestD := "", 3
	for _, f := range sortedKeys(fields) {
		if d := editDistance(name, f); d < bestD {
			best, bestD = f, d
		}
	}
	if best == "" {
		return " (known fields: " + strings.Join(sortedKeys(fields), ", ") + ")"
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return tagName(n.Tag) + " " + strconv.Quote(n.Value)
	}
	return "an alias"
}

func tagName(tag string) string {
	switch tag {
	case "!!str":
		return "string"
	case "!!int":
		return "integer"
	case "!!float":
		return "number"
	case "!!bool":
		return "boolean"
	case "!!null":
		return "null"
	case "!!timestamp":
		return "timestamp"
	}
	return strings.TrimPrefix(tag, "!!")
}

func typeName(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Float64:
		return "a number"
	}
	return "an integer"
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns a YAML parser error into an Error with its position.
// When data holds a plain (unquoted) value that ends in ":" — a Redis
// URL's ?key_prefix=NAME: above all — that is the likely cause, and the
// error points at it and says to quote it.
func syntaxError(file string, err error, data []byte) *Error {
	msg := err.Error()
	e := &Error{File: file, Msg: "YAML syntax: " + strings.TrimPrefix(msg, "yaml: ")}
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		e.Pos, e.Msg = Pos{Line: line, Column: 1}, "YAML syntax: "+m[2]
	}
	if line, col, value := colonEnded(data); line > 0 {
		e.Pos = Pos{Line: line, Column: col}
		hint := "a plain value ending in \":\" reads as a mapping key"
		if strings.Contains(value, "key_prefix=") {
			hint = "the Redis URL's ?key_prefix=NAME: ends in \":\", which YAML reads as a mapping key"
		}
		e.Msg += fmt.Sprintf("; %s: quote it, e.g. %q", hint, value)
	}
	return e
}

// plainColon matches a line whose value is a plain scalar ending in ":",
// as a block mapping entry or inside a flow mapping.
var plainColon = []*regexp.Regexp{
	regexp.MustCompile(`^\s*(?:-\s+)?[\w.-]+:\s+([^\s"'{\[&*!|>#%@` + "`" + `][^#]*?:)\s*(?:#.*)?$`),
	regexp.MustCompile(`[{,]\s*[\w.-]+:\s+([^\s"'{\[][^,}\s]*:)\s*[,}]`),
}

// colonEnded finds the first value plainColon matches: its line, column
// and text (1-based; 0 when there is none).
func colonEnded(data []byte) (line, col int, value string) {
	for i, text := range strings.Split(string(data), "\n") {
		for _, re := range plainColon {
			if m := re.FindStringSubmatchIndex(text); m != nil {
				return i + 1, m[2] + 1, text[m[2]:m[3]]
			}
		}
	}
	return 0, 0, ""
}
