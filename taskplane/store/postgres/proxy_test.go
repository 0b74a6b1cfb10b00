package postgres_test

import (
	"net"
	"sync"
	"testing"
)

// cutProxy forwards TCP connections to a database. cut refuses new ones and breaks the open ones
// (the database away), mend accepts again on the same address, and freeze stops forwarding in
// both directions without closing anything (the host of the process behind it partitioned away,
// or paused: the server sees a client that simply went quiet).
type cutProxy struct {
	t      *testing.T
	addr   string
	target string
	frozen chan struct{}

	mu    sync.Mutex
	ln    net.Listener
	conns []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	p := &cutProxy{t: t, addr: "127.0.0.1:0", target: target, frozen: make(chan struct{})}
	p.mend()
	p.addr = p.ln.Addr().String()
	t.Cleanup(p.cut)
	return p
}

func (p *cutProxy) mend() {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("proxy listen: %v", err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, d)
			p.mu.Unlock()
			go p.pipe(d, c)
			go p.pipe(c, d)
		}
	}()
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ln.Close()
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
