package main

import (
	"compress/gzip"
	"io"

	"google.golang.org/grpc/encoding"
)

// precompressedName is the grpc-encoding the gateway replay sends: gzip.
const precompressedName = "gzip"

// precompressedGzip replaces grpc's gzip compressor in the bench process.
// Compress passes bytes through: the gateway suite gzips each payload once
// beforehand (gzipPayloads), so that replaying at a high rate costs the
// bench no compression and leaves the 2 CPUs to the gateway. Decompress is
// real gzip, for what the sink receives. Every message the bench sends with
// gzip must therefore already be gzipped: only the replay does.
type precompressedGzip struct{}

func (precompressedGzip) Name() string { return precompressedName }

func (precompressedGzip) Compress(w io.Writer) (io.WriteCloser, error) { return nopWriteCloser{w}, nil }

func (precompressedGzip) Decompress(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) }

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

func init() {
	// After grpc's encoding/gzip (imported by otlpsink.go) registered its
	// own: package initialization runs imports first.
	encoding.RegisterCompressor(precompressedGzip{})
}
