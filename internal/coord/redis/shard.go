package redis

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"
)

// Key layout (docs/replicas.md). Every key and channel starts with the
// coordinator's prefix, then a namespace and the entity it belongs to:
// oncegate:claim:IDENTITY, oncegate:breaker:ROUTE, …. A Redis Cluster
// spreads keys over its shards by hash slot, and runs a script, or a
// command naming several keys, only if every key it touches is in one
// slot. There, the namespace and the entity are a hash tag —
// oncegate:{claim:IDENTITY} — and each script touches only keys made from
// one tag by appending to it (a breaker's window counts, a day's
// reservations): all of one entity's keys live on one shard, and the
// entities spread over all of them. On one server, or one Sentinel
// watches, names carry no tag: they are what they were before clusters.

// Namespaces of keys and channels.
const (
	nsClaim  = "claim:"
	nsOutput = "out:"
	nsOwner  = "owner:"
	nsSeen   = "seen:"
)

// clustered reports whether Redis is a cluster.
func (c *Coordinator) clustered() bool { return c.target.Mode == Cluster }

// key names entity id's key in namespace ns: in a cluster, ns and id are
// its hash tag, so that every key made by appending to it hashes to the
// same slot.
func (c *Coordinator) key(ns, id string) string {
	if c.clustered() {
		return c.prefix + "{" + ns + id + "}"
	}
	return c.prefix + ns + id
}

// outputKey names the stream that carries request requestID's output to
// joiners on other replicas; owner copies it there. In a cluster all of
// one owner's streams share the owner's tag, so that a replica reads
// every stream it follows from one owner with one XREAD (readGroup).
func (c *Coordinator) outputKey(owner, requestID string) string {
	if c.clustered() {
		return c.prefix + "{" + nsOutput + owner + "}" + requestID
	}
	return c.prefix + nsOutput + requestID
}

// readGroup names the streams one XREAD may read together: all of them
// on one server, one owner's in a cluster.
func (c *Coordinator) readGroup(owner string) string {
	if c.clustered() {
		return owner
	}
	return ""
}

// ownerChannel is the channel a gateway hears other replicas' watches on.
func (c *Coordinator) ownerChannel(owner string) string { return c.key(nsOwner, owner) }

// Pub/sub. On one server a gateway subscribes to its channel with
// SUBSCRIBE. A cluster broadcasts a PUBLISH to every node, and PUBLISH's
// and PUBSUB NUMSUB's counts are the receiving node's alone, so there
// the channel is a shard channel (Redis 7): SSUBSCRIBE on the node that
// serves its slot, SPUBLISH routed to it, PUBSUB SHARDNUMSUB asked of it —
// one node carries each message, and the counts are the cluster's.

// subscribe subscribes to this gateway's channel and waits until Redis
// confirmed it: from then on, other gateways' watches reach it.
func (c *Coordinator) subscribe(ctx context.Context) (*goredis.PubSub, error) {
	ch := c.ownerChannel(c.cfg.Owner)
	var ps *goredis.PubSub
	if c.clustered() {
		ps = c.rdb.SSubscribe(ctx, ch)
	} else {
		ps = c.rdb.Subscribe(ctx, ch)
	}
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return nil, err
	}
	return ps, nil
}

// publish sends msg to owner's channel (through a pipeline, or at once
// with c.rdb); its answer is how many gateways listen there.
func (c *Coordinator) publish(ctx context.Context, p goredis.Cmdable, owner string, msg []byte) *goredis.IntCmd {
	if c.clustered() {
		return p.SPublish(ctx, c.ownerChannel(owner), msg)
	}
	return p.Publish(ctx, c.ownerChannel(owner), msg)
}

// listeners is how many gateways listen on owner's channel: one while it
// runs, none once it stopped.
func (c *Coordinator) listeners(ctx context.Context, owner string) (int64, error) {
	ch := c.ownerChannel(owner)
	if !c.clustered() {
		n, err := c.rdb.PubSubNumSub(ctx, ch).Result()
		return n[ch], err
	}
	// PUBSUB is routed to any node; only the one serving the channel's
	// slot knows its subscribers.
	cl, ok := c.rdb.(*goredis.ClusterClient)
	if !ok {
		return 0, fmt.Errorf("a cluster's client is %T", c.rdb)
	}
	node, err := cl.MasterForKey(ctx, ch)
	if err != nil {
		return 0, err
	}
	n, err := node.PubSubShardNumSub(ctx, ch).Result()
	return n[ch], err
}
