package redis

import (
	"context"
	"os"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/oncegate/oncegate/internal/coord/redis/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// conformance is the coordination's behaviour, which holds on every kind
// of Redis deployment: one server, a Sentinel's, a cluster's (where
// every script's keys must share a hash slot, and pub/sub is sharded).
var conformance = []struct {
	name string
	run  func(t *testing.T, d redistest.Deployment)
}{
	{"OneClaimPerIdentityAcrossGateways", testOneClaimPerIdentityAcrossGateways},
	{"ARemoteJoinerReadsFromTheFirstByte", testARemoteJoinerReadsFromTheFirstByte},
	{"ARemoteJoinerLearnsTheOwnerIsGone", testARemoteJoinerLearnsTheOwnerIsGone},
	{"AWatchOfAFinishedFlightSaysGone", testAWatchOfAFinishedFlightSaysGone},
	{"ABreakerOpenedOnOneGatewayIsOpenOnAll", testABreakerOpenedOnOneGatewayIsOpenOnAll},
	{"HalfOpenProbesAreFleetWide", testHalfOpenProbesAreFleetWide},
	{"ProbeVerdictsAreCountedFleetWide", testProbeVerdictsAreCountedFleetWide},
	{"AttemptsInFlightAcrossTheFleetHoldABreakerClosed", testAttemptsInFlightAcrossTheFleetHoldABreakerClosed},
	{"TheRetryBudgetIsFleetWide", testTheRetryBudgetIsFleetWide},
	{"TenantCeilingAcrossGateways", testTenantCeilingAcrossGateways},
	{"TheDaysSpendIsSeededFromTheStore", testTheDaysSpendIsSeededFromTheStore},
	{"TenantRateAcrossGateways", testTenantRateAcrossGateways},
	{"TheRateCountsNewRequestsNotJoins", testTheRateCountsNewRequestsNotJoins},
	{"ALapsedClaimIsNotRenewed", testALapsedClaimIsNotRenewed},
	{"RoutesLoadIsSharedAcrossGateways", testRoutesLoadIsSharedAcrossGateways},
	{"ARoutesCoolingIsSharedAcrossGateways", testARoutesCoolingIsSharedAcrossGateways},
	{"RequestsInProgressAreCountedAcrossReplicas", testRequestsInProgressAreCountedAcrossReplicas},
	{"OneReplicaIsFirst", testOneReplicaIsFirst},
	{"RequestsInProgressNeverPastTheLimit", testRequestsInProgressNeverPastTheLimit},
	{"LeasesLapseUnlessRenewed", testLeasesLapseUnlessRenewed},
	{"KeyFeedTellsTheOtherReplica", testKeyFeedTellsTheOtherReplica},
}

// TestConformance runs the conformance suite against each deployment.
func TestConformance(t *testing.T) {
	for _, d := range redistest.Deployments() {
		t.Run(d.Name, func(t *testing.T) {
			for _, c := range conformance {
				t.Run(c.name, func(t *testing.T) { c.run(t, d) })
			}
		})
	}
}

// keysLike lists the keys matching pattern on the server that holds key
// (in a cluster, KEYS is a node's alone).
func keysLike(ctx context.Context, c *Coordinator, key, pattern string) ([]string, error) {
	if cl, ok := c.rdb.(*goredis.ClusterClient); ok {
		node, err := cl.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		return node.Keys(ctx, pattern).Result()
	}
	return c.rdb.Keys(ctx, pattern).Result()
}
