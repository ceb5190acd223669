package receipt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// fill sets v, whatever its type, at random: every field of every struct
// it reaches, so that a field added to a receipt's structs is written at
// random too — and JSON, which must name it, fails the test below if it
// does not. Zero values, nil and empty are drawn often: omitempty is
// where encoders differ.
func fill(t *rapid.T, v reflect.Value, path string) {
	if v.Type() == reflect.TypeFor[time.Time]() {
		sec := rapid.OneOf(rapid.Int64Range(-62135596800, 253402300799), rapid.Just(int64(0))).Draw(t, path+".sec")
		tm := time.Unix(sec, rapid.Int64Range(0, 999_999_999).Draw(t, path+".nsec"))
		switch rapid.IntRange(0, 3).Draw(t, path+".zone") {
		case 0:
			tm = tm.UTC()
		case 1:
			tm = tm.In(time.FixedZone("z", rapid.IntRange(-86399, 86399).Draw(t, path+".offset")))
		case 2:
			tm = time.Time{}
		}
		v.Set(reflect.ValueOf(tm))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(rapid.OneOf(rapid.Just(""), rapid.String(), rapid.StringMatching(`[a-z<>&"\\\x00-\x1f\x{2028}\x{2029}]{0,8}`),
			rapid.Map(rapid.SliceOf(rapid.Byte()), func(b []byte) string { return string(b) })).Draw(t, path))
	case reflect.Bool:
		v.SetBool(rapid.Bool().Draw(t, path))
	case reflect.Int, reflect.Int64:
		v.SetInt(rapid.OneOf(rapid.Just(int64(0)), rapid.Int64()).Draw(t, path))
	case reflect.Float64:
		v.SetFloat(rapid.OneOf(rapid.Just(0.0), rapid.Float64(), rapid.Float64Range(-1e-5, 1e-5),
			rapid.SampledFrom([]float64{1e21, 1e-7, 0.0000213, -0.5, 1e20, math.Copysign(0, -1)})).Draw(t, path))
	case reflect.Pointer:
		if rapid.Bool().Draw(t, path+"?") {
			v.SetZero()
			return
		}
		p := reflect.New(v.Type().Elem())
		fill(t, p.Elem(), path+"*")
		v.Set(p)
	case reflect.Slice:
		switch rapid.IntRange(0, 3).Draw(t, path+".len") {
		case 0:
			v.SetZero() // nil
			return
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0)) // empty
			return
		}
		n := rapid.IntRange(1, 3).Draw(t, path+".n")
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			fill(t, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.Map:
		switch rapid.IntRange(0, 3).Draw(t, path+".len") {
		case 0:
			v.SetZero()
			return
		case 1:
			v.Set(reflect.MakeMap(v.Type()))
			return
		}
		m := reflect.MakeMap(v.Type())
		for i := range rapid.IntRange(1, 4).Draw(t, path+".n") {
			k := reflect.New(v.Type().Key()).Elem()
			fill(t, k, fmt.Sprintf("%s.key%d", path, i))
			e := reflect.New(v.Type().Elem()).Elem()
			fill(t, e, fmt.Sprintf("%s.value%d", path, i))
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i), path+"."+v.Type().Field(i).Name)
			}
		}
	default:
		t.Fatalf("fill: %s has kind %s, which the test cannot set yet", path, v.Kind())
	}
}

// JSON writes exactly what encoding/json writes, for any receipt — or,
// where encoding/json refuses a value, refuses it too.
func TestJSONIsWhatEncodingJSONWrites(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var r Receipt
		fill(t, reflect.ValueOf(&r).Elem(), "r")
		want, wantErr := json.Marshal((*tagged)(&r))
		got, err := r.JSON()
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("JSON error %v, encoding/json's %v", err, wantErr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("JSON wrote\n%s\nencoding/json writes\n%s", got, want)
		}
		if viaMarshaler, err := json.Marshal(&r); err == nil && !bytes.Equal(viaMarshaler, want) {
			t.Fatalf("json.Marshal through MarshalJSON wrote\n%s\nwant\n%s", viaMarshaler, want)
		}
	})
}

// The typical receipt, both ways: the cost commit pays per request.
func BenchmarkMarshalReceiptJSON(b *testing.B) {
	r := typical()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.JSON(); err != nil {
			b.Fatal(err)
		}
	}
}
