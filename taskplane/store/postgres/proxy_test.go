package postgres_test

import (
	"net"
	"sync"
	"testing"
)

// cutProxy forwards TCP connections to a database. cut breaks the open ones and drops new ones
// as they come (the database away), mend forwards again, and freeze stops forwarding in both
// directions without closing anything (the host of the process behind it partitioned away, or
// paused: the server sees a client that simply went quiet).
//
// The proxy keeps its port while cut: it closed its listener and listened again on the same
// address, which another test's socket could have taken meanwhile (the tests run in parallel).
type cutProxy struct {
	t      *testing.T
	addr   string
	target string
	frozen chan struct{}

	mu    sync.Mutex
	down  bool
	conns []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &cutProxy{t: t, addr: ln.Addr().String(), target: target, frozen: make(chan struct{})}
	t.Cleanup(func() {
		ln.Close()
		p.cut()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			down := p.down
			p.mu.Unlock()
			if down {
				c.Close()
				continue
			}
			d, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			if p.down { // cut while dialing
				p.mu.Unlock()
				c.Close()
				d.Close()
				continue
			}
			p.conns = append(p.conns, c, d)
			p.mu.Unlock()
			go p.pipe(d, c)
			go p.pipe(c, d)
		}
	}()
	return p
}

// mend forwards new connections again.
func (p *cutProxy) mend() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// cut breaks every open connection and drops new ones until mend.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *cutProxy) freeze() { close(p.frozen) }

// pipe copies src to dst until either ends, then closes dst; once the proxy is frozen nothing
// passes any more, and nothing is closed.
func (p *cutProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case <-p.frozen:
				<-make(chan struct{}) // partitioned
			default:
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
}
