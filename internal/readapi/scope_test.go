package readapi

import (
	"slices"
	"testing"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/receipt"
)

// A tenant's key reads its own tenant, a virtual key its own receipts
// within it, the admin key every configured tenant and any it names.
func TestReadScope(t *testing.T) {
	acme, globex := &policy.Tenant{ID: "acme"}, &policy.Tenant{ID: "globex"}
	pol := &policy.Policy{Tenants: []*policy.Tenant{acme, globex}}
	admin, tenant, vkey := readScope{admin: true}, readScope{tenant: acme}, readScope{tenant: acme, key: "k1"}

	if got := admin.tenants(pol); !slices.Equal(got, []string{"acme", "globex"}) {
		t.Fatalf("the admin's tenants: %v", got)
	}
	if got, e := admin.filter(pol, "gone"); e != nil || !slices.Equal(got, []string{"gone"}) {
		t.Fatalf("the admin naming a tenant no longer configured: %v %v", got, e)
	}
	if got, e := tenant.filter(pol, ""); e != nil || !slices.Equal(got, []string{"acme"}) {
		t.Fatalf("a tenant's key: %v %v", got, e)
	}
	if _, e := tenant.filter(pol, "globex"); e == nil || e.Code != api.CodeInvalidRequest || e.Param != "tenant" {
		t.Fatalf("a tenant's key naming another tenant: %v", e)
	}
	mine, theirs := &receipt.Receipt{KeyID: "k1"}, &receipt.Receipt{KeyID: "k2"}
	if !tenant.reads(mine) || !tenant.reads(theirs) || !vkey.reads(mine) || vkey.reads(theirs) {
		t.Fatal("a virtual key reads only its own receipts, the tenant's key all of them")
	}
}
