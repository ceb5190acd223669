package redis

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/oncegate/oncegate/internal/coord"
	"github.com/oncegate/oncegate/internal/coord/redis/redistest"
)

// A cluster that lost a shard is an outage, not an answer: once the
// other nodes say so (CLUSTERDOWN), claims on them are refused with
// ErrUnavailable and Err says why; when the node is back, service
// resumes.
func TestAClusterThatLostAShardRefusesAndRecovers(t *testing.T) {
	cl := redistest.NewCluster(t)
	c, err := New(context.Background(), Config{URL: cl.URL(t), Owner: "gw", LeaseTTL: 5 * time.Second, Renew: time.Second, JoinBuffer: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	// An identity whose claim lives on a node that stays up: what it gets
	// is the live node's answer that the cluster is down.
	down := cl.Addrs()[1]
	id := ""
	for i := 0; id == ""; i++ {
		node, err := c.rdb.(*goredis.ClusterClient).MasterForKey(ctx, c.key(nsClaim, fmt.Sprintf("k:%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if node.Options().Addr != down {
			id = fmt.Sprint(i)
		}
	}
	cl.Stop(1)
	waitFor(t, "the cluster refusing", func() bool {
		p, _ := c.Place(ctx, arrival(id, "sha"))
		p.Flight.Finish(nil, nil)
		return errors.Is(p.Err, coord.ErrUnavailable) && errors.Is(c.Err(), coord.ErrUnavailable)
	})
	cl.Start(t, 1)
	waitFor(t, "recovery", func() bool {
		p, _ := c.Place(ctx, arrival(id, "sha"))
		defer p.Flight.Finish(nil, nil)
		return p.Err == nil && p.Owner && c.Err() == nil
	})
}

// Sentinel promotes the replica: the gateways carry on with the new
// master — they claim there, they are counted as listening there (a
// subscription left on the demoted master is moved), and a remote join
// works across them.
func TestASentinelFailoverIsSurvived(t *testing.T) {
	s := redistest.NewSentinel(t)
	a, b := pair(t, s.URL(t), 5*time.Second)
	ctx := context.Background()
	before, _ := a.Place(ctx, arrival("before", "sha"))
	if before.Err != nil {
		t.Fatalf("before the failover: %v", before.Err)
	}
	before.Flight.Finish(nil, nil)
	s.Failover(t)
	waitFor(t, "claims on the new master", func() bool {
		p, _ := a.Place(ctx, arrival("after", "sha"))
		defer p.Flight.Finish(nil, nil)
		return p.Err == nil && p.Owner && p.Remote == nil
	})
	waitFor(t, "both gateways listening on the new master", func() bool {
		x, err1 := b.OwnerAlive(ctx, "gw-a")
		y, err2 := a.OwnerAlive(ctx, "gw-b")
		return err1 == nil && err2 == nil && x && y
	})
	pa, _ := a.Place(ctx, arrival("joined", "sha"))
	pa.Flight.SetHead(&coord.Head{Status: 200})
	pa.Flight.Write([]byte("after the failover"))
	pb, _ := b.Place(ctx, arrival("joined", "sha"))
	if pb.Remote == nil {
		t.Fatalf("the other gateway did not meet the claim: %+v", pb)
	}
	sub, err := b.Watch(ctx, "k:joined", *pb.Remote, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Leave()
	if _, err := sub.Head(ctx); err != nil {
		t.Fatal(err)
	}
	if chunk, _, err := sub.Next(ctx); err != nil || string(chunk) != "after the failover" {
		t.Fatalf("%q %v", chunk, err)
	}
	pa.Flight.Finish(nil, nil)
	pb.Flight.Finish(nil, nil)
}
