package main

// The OTLP sink: a loopback gRPC endpoint of the OTLP profiles service that
// counts what arrives, for the busy suite's bytes per node per minute and
// the gateway suite. It never decodes a request: a raw codec hands it the
// serialized ExportProfilesServiceRequest, which it can keep (recording
// realistic payloads for the gateway suite) and answers with an empty
// response. Sizes are counted three ways: the message as compressed on the
// wire (grpc's InPayload.WireLength: gzip with the exporter's default
// compression, plus gRPC's 5-byte message prefix), the message
// uncompressed, and every byte read from the TCP connections (HTTP/2
// framing and headers included).

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // registers the gzip compressor both ways
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// profilesExportMethod is the full gRPC method name of OTLP profiles
// export, as pdata v1.71.0 (profiles v1development) serves it.
const (
	profilesService      = "opentelemetry.proto.collector.profiles.v1development.ProfilesService"
	profilesExportMethod = "/" + profilesService + "/Export"
)

// rawMessage is a serialized protobuf message, passed through by rawCodec.
type rawMessage struct{ b []byte }

// rawCodec passes messages through as bytes: the bench neither builds nor
// decodes OTLP, so its own CPU does not depend on the payloads' structure.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(*rawMessage)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
	}
	return m.b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	m.b = append(m.b[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

// otlpCounts is what a sink has received so far (or over a window, as a
// difference of two snapshots).
type otlpCounts struct {
	requests  int64
	wireBytes int64 // messages as sent: compressed
	rawBytes  int64 // messages uncompressed
	connBytes int64 // read from the TCP connections: HTTP/2 frames, headers
}

func (c otlpCounts) sub(o otlpCounts) otlpCounts {
	return otlpCounts{c.requests - o.requests, c.wireBytes - o.wireBytes, c.rawBytes - o.rawBytes, c.connBytes - o.connBytes}
}

// otlpSink is a running sink.
type otlpSink struct {
	addr   string // host:port it listens on
	server *grpc.Server
	done   chan struct{}

	requests, wireBytes, rawBytes, connBytes atomic.Int64
	// anyVersion: requests without the profiles development version
	// header the collector sends are taken too (another profiler's).
	anyVersion atomic.Bool

	mu        sync.Mutex
	events    []otlpEvent // every request, in arrival order
	recording bool
	recorded  [][]byte // serialized requests, with recording on
}

// otlpEvent is one request the sink received.
type otlpEvent struct {
	at        time.Time
	wireBytes int64 // compressed, as sent
}

// startOTLPSink listens on a free loopback port and serves OTLP profiles
// export until close.
func startOTLPSink() (*otlpSink, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("OTLP sink: %w", err)
	}
	s := &otlpSink{addr: l.Addr().String(), done: make(chan struct{})}
	s.server = grpc.NewServer(
		grpc.ForceServerCodec(rawCodec{}),
		grpc.StatsHandler(payloadCounter{wire: &s.wireBytes, raw: &s.rawBytes, inbound: true, perRPC: true}),
		grpc.MaxRecvMsgSize(64<<20),
	)
	s.server.RegisterService(&grpc.ServiceDesc{
		ServiceName: profilesService,
		HandlerType: (*any)(nil),
		Methods:     []grpc.MethodDesc{{MethodName: "Export", Handler: s.export}},
	}, s)
	go func() {
		defer close(s.done)
		_ = s.server.Serve(countingListener{Listener: l, n: &s.connBytes})
	}()
	return s, nil
}

// export is the Export method's handler.
func (s *otlpSink) export(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	var m rawMessage
	if err := dec(&m); err != nil {
		return nil, err
	}
	if err := pprofileotlp.ValidateDevelopmentVersion(metadata.ValueFromIncomingContext(ctx, pprofileotlp.DevelopmentVersionHeader)); err != nil && !s.anyVersion.Load() {
		return nil, err
	}
	s.requests.Add(1)
	var wire int64
	if cell, ok := ctx.Value(wireCellKey{}).(*atomic.Int64); ok {
		wire = cell.Load() // InPayload was handled inside dec
	}
	s.mu.Lock()
	s.events = append(s.events, otlpEvent{at: time.Now(), wireBytes: wire})
	if s.recording {
		s.recorded = append(s.recorded, m.b)
	}
	s.mu.Unlock()
	return &rawMessage{}, nil
}

// counts returns what the sink has received so far.
func (s *otlpSink) counts() otlpCounts {
	return otlpCounts{s.requests.Load(), s.wireBytes.Load(), s.rawBytes.Load(), s.connBytes.Load()}
}

// record turns the keeping of requests on or off.
func (s *otlpSink) record(on bool) {
	s.mu.Lock()
	s.recording = on
	s.mu.Unlock()
}

// eventsSince returns the requests received at or after t.
func (s *otlpSink) eventsSince(t time.Time) []otlpEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, _ := slices.BinarySearchFunc(s.events, t, func(e otlpEvent, t time.Time) int { return e.at.Compare(t) })
	return append([]otlpEvent(nil), s.events[i:]...)
}

// payloads returns the requests kept while recording was on.
func (s *otlpSink) payloads() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.recorded...)
}

// close stops the sink at once (exporters still connected see an error).
func (s *otlpSink) close() {
	s.server.Stop()
	<-s.done
}

// payloadCounter is a grpc stats handler adding the sizes of the messages
// received (inbound) or sent (!inbound) to wire and raw. With perRPC, each
// RPC's context carries a cell (wireCellKey) that its received messages'
// wire size is added to.
type payloadCounter struct {
	wire, raw *atomic.Int64
	inbound   bool
	perRPC    bool
}

type wireCellKey struct{}

func (p payloadCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	if p.perRPC {
		return context.WithValue(ctx, wireCellKey{}, new(atomic.Int64))
	}
	return ctx
}

func (payloadCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (payloadCounter) HandleConn(context.Context, stats.ConnStats)                       {}

func (p payloadCounter) HandleRPC(ctx context.Context, st stats.RPCStats) {
	switch st := st.(type) {
	case *stats.InPayload:
		if p.inbound {
			if cell, ok := ctx.Value(wireCellKey{}).(*atomic.Int64); ok {
				cell.Add(int64(st.WireLength))
			}
			p.wire.Add(int64(st.WireLength))
			p.raw.Add(int64(st.Length))
		}
	case *stats.OutPayload:
		if !p.inbound {
			p.wire.Add(int64(st.WireLength))
			p.raw.Add(int64(st.Length))
		}
	}
}

// countingListener counts the bytes read from the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, n: l.n}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.n.Add(int64(n))
	return n, err
}
