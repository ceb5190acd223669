package gateway

import (
	"github.com/oncegate/oncegate/internal/receipt"
)

// What a virtual key made is its own (docs/keys.md, "Ownership"): its
// Idempotency-Keys and keyless fingerprints name identities in a scope
// of its own, never another key's, and it reads, continues, deletes and
// lists only its own stored responses and receipts. The tenant's keys
// from the configuration share one scope, the tenant's, and read all of
// the tenant's; the admin key reads every tenant's receipts. Another
// key's object is answered as one that does not exist.

// mayReadReceipt reports whether a request that came with virtual key
// keyID ("" for the tenant's own keys) may read receipt rc. (A turn's
// owner is checked in package conversation.)
func mayReadReceipt(keyID string, rc *receipt.Receipt) bool {
	return keyID == "" || rc.KeyID == keyID
}
