//go:build linux

package e2e

import (
	"context"
	"net"
	"sync"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // the otlp_grpc exporter compresses by default
)

// otlpProfilesServer is a real OTLP/gRPC profiles endpoint on loopback that
// keeps every request it receives.
type otlpProfilesServer struct {
	pprofileotlp.UnimplementedGRPCServer

	mu       sync.Mutex
	received []pprofile.Profiles
}

func startOTLPServer(t *testing.T) (*otlpProfilesServer, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &otlpProfilesServer{}
	gs := grpc.NewServer()
	pprofileotlp.RegisterGRPCServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return srv, lis.Addr().String()
}

func (s *otlpProfilesServer) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	pd := pprofile.NewProfiles()
	req.Profiles().CopyTo(pd)
	s.mu.Lock()
	s.received = append(s.received, pd)
	s.mu.Unlock()
	return pprofileotlp.NewExportResponse(), nil
}

func (s *otlpProfilesServer) all() []pprofile.Profiles {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]pprofile.Profiles(nil), s.received...)
}
