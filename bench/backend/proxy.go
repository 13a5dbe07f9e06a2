package main

import (
	"io"
	"net"
	"sync/atomic"
)

// countingProxy forwards TCP connections to a target and counts the bytes
// clients send: what the exporter puts on the wire (compressed OTLP and
// its gRPC or HTTP framing), whichever transport it uses.
type countingProxy struct {
	ln     net.Listener
	target string
	sent   atomic.Int64
}

func startProxy(target string) (*countingProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &countingProxy{ln: ln, target: target}
	go p.accept()
	return p, nil
}

func (p *countingProxy) addr() string { return p.ln.Addr().String() }

func (p *countingProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		go p.forward(c)
	}
}

func (p *countingProxy) forward(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(client, server)
		_ = client.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	_, _ = io.Copy(server, countingReader{client, &p.sent})
	_ = server.(*net.TCPConn).CloseWrite()
	<-done
}

// close stops accepting; connections still open end with their peers.
func (p *countingProxy) close() { _ = p.ln.Close() }

// countingReader adds what each Read returns to n: a long-lived connection
// (gRPC keeps one) is counted as it goes.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}
