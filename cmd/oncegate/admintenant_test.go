package main

import (
	"strings"
	"testing"
)

// The admin tenant must be a tenant of the file, and needs an admin key.
func TestCheckHoldsAdminTenant(t *testing.T) {
	t.Setenv("CHECK_TENANT_KEY", "sk-tenant-check")
	t.Setenv("CHECK_AZURE_KEY", "k")
	for _, c := range []struct{ add, want string }{
		{"admin_tenant: nobody\nadmin_key_env: CHECK_ADMIN\n", `admin_tenant: names no tenant of this file: "nobody"`},
		{"admin_tenant: acme\n", "admin_tenant: needs an admin key"},
	} {
		code, _, errOut := runCLI("check", "--config", writeConfig(t, c.add+providersConfig))
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, want %q\n%s", c.add, code, c.want, errOut)
		}
	}
}
