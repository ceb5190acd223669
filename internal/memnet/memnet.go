// Package memnet is an in-memory network for tests: listeners and dials
// by name, each connection a net.Pipe. Inside a testing/synctest bubble a
// goroutine blocked on such a connection is durably blocked, so the
// bubble's fake clock advances past timeouts at once and deterministically
// — which a real socket does not allow.
package memnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
)

// Network holds named listeners. The zero value is not usable; use New.
type Network struct {
	mu        sync.Mutex
	listeners map[string]*Listener
	conns     []net.Conn
}

// New returns an empty network.
func New() *Network { return &Network{listeners: map[string]*Listener{}} }

// Listen opens a listener at addr ("host:port"), replacing none: an
// address in use is an error.
func (n *Network) Listen(addr string) (*Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.listeners[addr]; ok {
		return nil, fmt.Errorf("memnet: listen %s: address in use", addr)
	}
	l := &Listener{net: n, addr: pipeAddr(addr), conns: make(chan net.Conn), done: make(chan struct{})}
	n.listeners[addr] = l
	return l, nil
}

// DialContext connects to the listener at addr, as net.Dialer.DialContext
// does; network is ignored. It fails when nothing listens there.
func (n *Network) DialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.listeners[addr]
	n.mu.Unlock()
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: "memnet", Addr: pipeAddr(addr), Err: errors.New("connection refused")}
	}
	client, server := net.Pipe()
	n.mu.Lock()
	n.conns = append(n.conns, client, server)
	n.mu.Unlock()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, &net.OpError{Op: "dial", Net: "memnet", Addr: pipeAddr(addr), Err: errors.New("connection refused")}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close closes every listener and every connection ever dialed, so that
// whatever still reads or writes one (a response body nobody closed, a
// keep-alive connection) returns.
func (n *Network) Close() {
	n.mu.Lock()
	ls := make([]*Listener, 0, len(n.listeners))
	for _, l := range n.listeners {
		ls = append(ls, l)
	}
	conns := n.conns
	n.conns = nil
	n.mu.Unlock()
	for _, l := range ls {
		_ = l.Close()
	}
	for _, c := range conns {
		_ = c.Close()
	}
}

// Listener accepts the connections dialed to its address.
type Listener struct {
	net   *Network
	addr  pipeAddr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

// Accept waits for the next connection.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and frees the address.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.net.mu.Lock()
		delete(l.net.listeners, string(l.addr))
		l.net.mu.Unlock()
	})
	return nil
}

// Addr is the listener's address.
func (l *Listener) Addr() net.Addr { return l.addr }

type pipeAddr string

func (a pipeAddr) Network() string { return "memnet" }
func (a pipeAddr) String() string  { return string(a) }
