package alerts

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

// StateStore keeps small named values (ledger.Store has it).
type StateStore interface {
	State(ctx context.Context, name string) ([]byte, error)
	SaveState(ctx context.Context, name string, value []byte) error
}

// StoreOnce remembers the crossings sent in the store, so that a
// gateway that restarts does not send them again. It decides within one
// process only (two processes may both find a key missing): replicas
// share the coordination's Once instead.
type StoreOnce struct {
	Store StateStore
	mu    sync.Mutex
}

// First is true if key was not kept yet, and keeps it. ttl is ignored:
// the keys stay (one small row per crossing).
func (o *StoreOnce) First(ctx context.Context, key string, _ time.Duration) (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, err := o.Store.State(ctx, key)
	switch {
	case err == nil:
		return false, nil
	case !errors.Is(err, ledger.ErrNotFound):
		return false, fmt.Errorf("read a budget alert's mark: %w", err)
	}
	if err := o.Store.SaveState(ctx, key, []byte("1")); err != nil {
		return false, fmt.Errorf("keep a budget alert's mark: %w", err)
	}
	return true, nil
}
