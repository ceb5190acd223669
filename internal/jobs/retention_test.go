package jobs

import (
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/policy"
)

// The job runs every minute, or every half of the shorter retention,
// never more than once a second; histories are kept at least as long as
// the records, which on_expired: reject keeps 30 times longer.
func TestRetentionScheduleAndHorizons(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		retention, receipts   time.Duration
		onExpired             string
		every, records, swept time.Duration
	}{
		{"defaults", 24 * time.Hour, 2160 * time.Hour, "new", time.Minute, 24 * time.Hour, 2160 * time.Hour},
		{"receipts kept forever", 24 * time.Hour, 0, "new", time.Minute, 24 * time.Hour, 0},
		{"a short key retention", 10 * time.Second, 2160 * time.Hour, "new", 5 * time.Second, 10 * time.Second, 2160 * time.Hour},
		{"a short receipt retention", 24 * time.Hour, 90 * time.Second, "new", 45 * time.Second, 24 * time.Hour, 24 * time.Hour},
		{"never more than once a second", 300 * time.Millisecond, 0, "new", time.Second, 300 * time.Millisecond, 0},
		{"reject keeps records 30 times longer", 24 * time.Hour, 240 * time.Hour, "reject", time.Minute, 720 * time.Hour, 720 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := &policy.Policy{Idempotency: config.Idempotency{Retention: config.Duration(tc.retention), OnExpired: tc.onExpired},
				Config: &config.Config{Ledger: config.Ledger{ReceiptRetention: config.Duration(tc.receipts)}}}
			j := &retention{policy: func() *policy.Policy { return pol }}
			records, swept := horizons(pol)
			if every := j.every(); every != tc.every || records != tc.records || swept != tc.swept {
				t.Fatalf("every %v, records %v, histories %v; want %v, %v, %v", every, records, swept, tc.every, tc.records, tc.swept)
			}
		})
	}
}
