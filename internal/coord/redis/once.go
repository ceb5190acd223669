package redis

import (
	"context"
	"time"
)

// First is true for exactly one caller of key across every replica
// sharing this Redis — the first — and false for the rest, until ttl
// passes (0: for ever). Budget alerts use it so that one replica sends
// each crossing (docs/operations.md).
func (c *Coordinator) First(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	ok, err := c.rdb.SetNX(ctx, c.key("once:", key), 1, ttl).Result()
	if err = c.check(err); err != nil {
		return false, err
	}
	return ok, nil
}
