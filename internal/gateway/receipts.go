package gateway

import (
	"errors"
	"sort"
	"sync"

	"github.com/oncegate/oncegate/internal/receipt"
)

// ErrNotFound: no receipt with that id for that tenant.
var ErrNotFound = errors.New("receipt not found")

// ReceiptStore keeps receipts, scoped by tenant. Implementations are safe
// for concurrent use.
type ReceiptStore interface {
	// Put stores or replaces a receipt.
	Put(r *receipt.Receipt) error
	// Get returns the tenant's receipt, or ErrNotFound (also for another
	// tenant's receipt).
	Get(tenant, requestID string) (*receipt.Receipt, error)
	// List returns up to limit of the tenant's receipts with request ids
	// after `after`, oldest first (request ids are time-ordered).
	List(tenant string, limit int, after string) ([]*receipt.Receipt, error)
}

// MemoryReceipts keeps the most recent receipts in memory.
type MemoryReceipts struct {
	mu    sync.Mutex
	max   int
	byID  map[string]*receipt.Receipt
	order []string
}

// NewMemoryReceipts keeps up to max receipts, dropping the oldest.
func NewMemoryReceipts(max int) *MemoryReceipts {
	return &MemoryReceipts{max: max, byID: map[string]*receipt.Receipt{}}
}

var _ ReceiptStore = (*MemoryReceipts)(nil)

// Put stores a copy of r.
func (m *MemoryReceipts) Put(r *receipt.Receipt) error {
	c := *r
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.byID[r.RequestID]; !ok {
		m.order = append(m.order, r.RequestID)
	}
	m.byID[r.RequestID] = &c
	for len(m.order) > m.max {
		delete(m.byID, m.order[0])
		m.order = m.order[1:]
	}
	return nil
}

// Get returns the tenant's receipt.
func (m *MemoryReceipts) Get(tenant, id string) (*receipt.Receipt, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.byID[id]
	if !ok || r.Tenant != tenant {
		return nil, ErrNotFound
	}
	c := *r
	return &c, nil
}

// List returns the tenant's receipts after `after`, oldest first.
func (m *MemoryReceipts) List(tenant string, limit int, after string) ([]*receipt.Receipt, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*receipt.Receipt
	for _, id := range m.order {
		if r := m.byID[id]; r.Tenant == tenant && id > after {
			c := *r
			out = append(out, &c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].RequestID < out[j].RequestID })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
