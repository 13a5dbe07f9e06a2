//go:build linux

package e2e

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/profiles/v1development"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// releasedSink is an OTLP profiles endpoint built on the released
// v1development protos (go.opentelemetry.io/proto/otlp v1.10.0, profiles
// v0.3.0), the types a backend such as Grafana Pyroscope 2.0.6 decodes our
// requests into. It keeps every request as those types decoded it, before it
// answers: like a backend that has written the data and is slow to say so.
type releasedSink struct {
	collectorpb.UnimplementedProfilesServiceServer

	delay time.Duration // how long each answer takes
	every time.Duration // when set, at most one request is let in per every
	gate  sync.Mutex    // held by a request waiting for its turn
	next  time.Time     // when the gate lets the next request in

	mu       sync.Mutex
	received []*collectorpb.ExportProfilesServiceRequest
	refused  []string       // requests the HTTP handler could not decode, and why
	versions map[string]int // the profiles development version each request declared ("" none)
	viaGRPC  int            // requests received over gRPC
	viaHTTP  int            // and over HTTP
}

// versionHeader is the request metadata (gRPC) or header (HTTP) in which
// the collector's exporters declare the profiles schema they encode
// (collector v0.163, #16147).
const versionHeader = "otlp-profiles-development-version"

// maxRequestBytes bounds the body the HTTP handler reads (decompressed).
const maxRequestBytes = 64 << 20

// startReleasedGRPCSink serves the released ProfilesService over gRPC on
// loopback and returns the sink and its address.
func startReleasedGRPCSink(t *testing.T, delay time.Duration) (*releasedSink, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &releasedSink{delay: delay}
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(maxRequestBytes))
	collectorpb.RegisterProfilesServiceServer(gs, s)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return s, lis.Addr().String()
}

// startReleasedHTTPSink serves POST /v1development/profiles (protobuf,
// optionally gzip-encoded, as otlp_http sends it) on loopback and returns
// the sink and the base URL for the exporter's endpoint.
func startReleasedHTTPSink(t *testing.T) (*releasedSink, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &releasedSink{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1development/profiles", s.serveHTTP)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s, "http://" + lis.Addr().String()
}

// Export keeps the request, then answers after the sink's delay (or when
// the client gives up).
func (s *releasedSink) Export(ctx context.Context, req *collectorpb.ExportProfilesServiceRequest) (*collectorpb.ExportProfilesServiceResponse, error) {
	if err := s.admit(ctx); err != nil {
		return nil, err
	}
	md, _ := metadata.FromIncomingContext(ctx)
	s.keep(req, strings.Join(md.Get(versionHeader), ","))
	s.mu.Lock()
	s.viaGRPC++
	s.mu.Unlock()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(s.delay):
	}
	return &collectorpb.ExportProfilesServiceResponse{}, nil
}

func (s *releasedSink) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if err := s.admit(r.Context()); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	req, err := decodeHTTPRequest(r)
	if err != nil {
		s.mu.Lock()
		s.refused = append(s.refused, err.Error())
		s.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.keep(req, strings.Join(r.Header.Values(versionHeader), ","))
	s.mu.Lock()
	s.viaHTTP++
	s.mu.Unlock()
	body, err := proto.Marshal(&collectorpb.ExportProfilesServiceResponse{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(body)
}

// decodeHTTPRequest reads an OTLP/HTTP protobuf body into the released types.
func decodeHTTPRequest(r *http.Request) (*collectorpb.ExportProfilesServiceRequest, error) {
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		return nil, fmt.Errorf("content type %q: only application/x-protobuf is served", ct)
	}
	var body io.Reader = r.Body
	switch enc := r.Header.Get("Content-Encoding"); enc {
	case "":
	case "gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, fmt.Errorf("gzip body: %w", err)
		}
		defer zr.Close()
		body = zr
	default:
		return nil, fmt.Errorf("content encoding %q not served", enc)
	}
	b, err := io.ReadAll(io.LimitReader(body, maxRequestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if len(b) > maxRequestBytes {
		return nil, fmt.Errorf("body over %d bytes", maxRequestBytes)
	}
	req := &collectorpb.ExportProfilesServiceRequest{}
	if err := proto.Unmarshal(b, req); err != nil {
		return nil, fmt.Errorf("decode ExportProfilesServiceRequest: %w", err)
	}
	return req, nil
}

// admit waits for the request's turn when the sink lets one in per
// s.every: a backend that keeps up with one request a minute. It returns
// the context's error when the client gives up first.
func (s *releasedSink) admit(ctx context.Context) error {
	if s.every == 0 {
		return nil
	}
	s.gate.Lock()
	defer s.gate.Unlock()
	if wait := time.Until(s.next); wait > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	s.next = time.Now().Add(s.every)
	return nil
}

func (s *releasedSink) keep(req *collectorpb.ExportProfilesServiceRequest, version string) {
	s.mu.Lock()
	s.received = append(s.received, req)
	if s.versions == nil {
		s.versions = map[string]int{}
	}
	s.versions[version]++
	s.mu.Unlock()
}

// declaredVersions counts the requests by the profiles development version
// they declared.
func (s *releasedSink) declaredVersions() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.versions)
}

// protocols returns how many requests came over gRPC and over HTTP.
func (s *releasedSink) protocols() (grpc, http int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.viaGRPC, s.viaHTTP
}

// requests returns what the sink has received so far.
func (s *releasedSink) requests() []*collectorpb.ExportProfilesServiceRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*collectorpb.ExportProfilesServiceRequest(nil), s.received...)
}

// refusals returns why the requests the sink could not decode were refused.
func (s *releasedSink) refusals() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.refused...)
}
