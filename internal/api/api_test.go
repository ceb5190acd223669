package api

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// Every client-facing code has its status: none falls to a generic 500.
func TestEveryCodeHasAStatus(t *testing.T) {
	t.Parallel()
	for _, code := range []string{CodeInvalidRequest, CodeInvalidKey, CodeUnauthorized, CodeModelNotFound, CodeReceiptNotFound, CodeNotFound,
		CodeMethodNotAllowed, CodeKeyInUse, CodeKeyExpired, CodeKeyReused, CodeTenantRateLimited, CodeTenantBudget, CodeOutcomeUnknown,
		CodeUpstreamUnavailable, CodeCircuitOpen, CodeRetryBudget, CodeDeadline, CodeProtocolViolation, CodeRequestTooLarge, CodeInternal,
		CodeStoreUnavailable, CodeCoordinationUnavailable} {
		if _, ok := codeStatus[code]; !ok {
			t.Errorf("code %s has no status", code)
		}
	}
}

// docs/errors.md lists every code with the status and x-should-retry the
// code gives it.
func TestTheDocsListEveryCode(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		code := strings.Trim(strings.TrimSpace(cells[1]), "`")
		cs, ok := codeStatus[code]
		if !ok {
			t.Errorf("the docs list %s, which is no code", code)
			continue
		}
		if got := strings.TrimSpace(cells[2]) + " " + strings.TrimSpace(cells[3]); got != strconv.Itoa(cs.status)+" "+strconv.FormatBool(cs.retry) {
			t.Errorf("%s: the docs say %s, the code %d %v", code, got, cs.status, cs.retry)
		}
		seen[code] = true
	}
	for code := range codeStatus {
		if !seen[code] {
			t.Errorf("docs/errors.md does not list %s", code)
		}
	}
}
