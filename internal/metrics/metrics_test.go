package metrics

import "testing"

// The live panel's counts are kept per tenant as well as for all: a
// tenant's view holds its own requests, dedup outcomes and turns only.
func TestLiveCountsPerTenant(t *testing.T) {
	m := New(nil)
	m.ObserveRequest(Request{Tenant: "acme", Model: "chat", Terminal: "succeeded", Attempts: 2})
	m.ObserveRequest(Request{Tenant: "globex", Model: "chat", Terminal: "succeeded", Attempts: 1})
	m.ObserveDedup("acme", "miss")
	m.ObserveDedup("acme", "replayed")
	m.ObserveDedup("globex", "miss")
	m.ObserveTurn("acme", "user")
	m.ObserveTurn("globex", "user")
	m.ObserveTurn("globex", "assistant")
	all, acme, globex, nobody := m.Live(""), m.Live("acme"), m.Live("globex"), m.Live("initech")
	if all.Requests != 2 || all.Attempts != 3 || all.Dedup["miss"] != 2 || all.UserTurns != 2 || all.TurnRatio != 0.5 {
		t.Fatalf("all: %+v", all)
	}
	if acme.Requests != 1 || acme.Attempts != 2 || acme.Dedup["miss"] != 1 || acme.Dedup["replayed"] != 1 || acme.UserTurns != 1 || acme.TurnRatio != 0 {
		t.Fatalf("acme: %+v", acme)
	}
	if globex.Requests != 1 || globex.Attempts != 1 || globex.Dedup["replayed"] != 0 || globex.TurnRatio != 1 {
		t.Fatalf("globex: %+v", globex)
	}
	if nobody.Requests != 0 || len(nobody.Dedup) != 0 || nobody.TurnRatio != 1 {
		t.Fatalf("a tenant with nothing: %+v", nobody)
	}
}
