package mock

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// docs/mock.md documents the fault script: every field of Rule and Fault
// and every fault type, and its example is a script the mock reads.
func TestTheDocsDescribeTheFaultScript(t *testing.T) {
	doc, err := os.ReadFile("../../docs/mock.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	for _, v := range []any{Rule{}, Fault{}} {
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if !strings.Contains(text, "`"+name+"`") {
				t.Errorf("docs/mock.md does not describe %s.%s (%q)", typ.Name(), typ.Field(i).Name, name)
			}
		}
	}
	for _, f := range []string{FaultStatus, FaultContextLength, FaultContentPolicy, FaultQuota, FaultReset, FaultHang,
		FaultSilentClose, FaultSlowFirstToken, FaultDropAfter, FaultStallAfter, FaultMalformedAfter, FaultNoDone,
		FaultStreamError, FaultRejectPrefill, FaultGarbage, FaultCommitThenHang, FaultCommitThenReset, FaultCommitThen502,
		FaultCommitTwiceThen502, FaultAuth, FaultModelNotFound, FaultBadCRCAfter} {
		if !strings.Contains(text, "| `"+f+"` |") {
			t.Errorf("docs/mock.md does not describe the fault type %q", f)
		}
	}
	m := regexp.MustCompile("(?s)```json\n(.*?)```").FindStringSubmatch(text)
	if m == nil {
		t.Fatal("docs/mock.md has no example script")
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(m[1])))
	dec.DisallowUnknownFields()
	var s Script
	if err := dec.Decode(&s); err != nil || len(s.Rules) == 0 {
		t.Fatalf("the example script: %v %+v", err, s)
	}
}
