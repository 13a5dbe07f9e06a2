// Package processctx reads the process context an OpenTelemetry SDK
// publishes for out-of-process readers (OTEP 4719): a mapping named
// OTEL_CTX whose header points at a protobuf ProcessContext, the SDK's
// resource and extra attributes (among them the thread context's
// threadlocal.* keys, OTEP 4947).
//
// Everything read is the process's to forge: reads are bounded, the header
// is validated before its payload is read, and a payload changing under the
// read (its publication timestamp moved) is read again a bounded number of
// times, never taken torn.
package processctx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// The header's layout (OTEP 4719): signature, version, payload size, the
// publication timestamp (CLOCK_BOOTTIME ns; 0 while being updated) and the
// payload's address in the process. Native endianness: both our targets
// are little-endian.
const (
	headerSize     = 32
	offVersion     = 8
	offPayloadSize = 12
	offPublished   = 16
	offPayload     = 24
	version        = 2
	// MaxPayload bounds the payload read: SDKs publish a few KiB.
	MaxPayload = 64 << 10
	// attempts bounds the reads of a context being updated meanwhile.
	attempts = 3
)

var signature = []byte("OTEL_CTX")

// mappingNames are how /proc/PID/maps names the mapping, by how the SDK
// could create and name it (memfd and prctl, prctl only, memfd only).
var mappingNames = []string{"[anon_shmem:OTEL_CTX]", "[anon:OTEL_CTX]", "/memfd:OTEL_CTX"}

// Why a context could not be read; errors wrap one of these.
var (
	ErrSignature = errors.New("no OTEL_CTX signature")
	ErrVersion   = errors.New("unsupported process context version")
	ErrSize      = errors.New("process context payload too large")
	ErrUpdating  = errors.New("process context kept changing while read")
	ErrPayload   = errors.New("malformed process context payload")
)

// Context is one publication of a process's context.
type Context struct {
	// PublishedAt identifies the publication: a new one has another.
	PublishedAt uint64
	// Resource holds the SDK's resource attributes (service.name, ...).
	Resource map[string]any
	// Attributes holds the extra attributes (ProcessContext.attributes).
	Attributes map[string]any
}

// Find returns the start of pid's process context mapping among maps.
func Find(maps []procfs.Map) (uint64, bool) {
	for _, m := range maps {
		for _, name := range mappingNames {
			if strings.HasPrefix(m.Path, name) && m.End-m.Start >= headerSize {
				return m.Start, true
			}
		}
	}
	return 0, false
}

// Published reads the publication timestamp of the context at addr in mem
// (0: being updated), after checking its signature and version: what a
// reader polls to know whether to read the context again.
func Published(mem io.ReaderAt, addr uint64) (uint64, error) {
	h, err := readHeader(mem, addr)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(h[offPublished:]), nil
}

// Read reads and decodes the context at addr in mem, following OTEP
// 4719's reading protocol.
func Read(mem io.ReaderAt, addr uint64) (Context, error) {
	for range attempts {
		h, err := readHeader(mem, addr)
		if err != nil {
			return Context{}, err
		}
		published := binary.LittleEndian.Uint64(h[offPublished:])
		if published == 0 {
			continue
		}
		size := binary.LittleEndian.Uint32(h[offPayloadSize:])
		if size > MaxPayload {
			return Context{}, fmt.Errorf("%w: %d bytes (at most %d)", ErrSize, size, MaxPayload)
		}
		payload := make([]byte, size)
		if err := readAt(mem, payload, binary.LittleEndian.Uint64(h[offPayload:])); err != nil {
			return Context{}, fmt.Errorf("read process context payload: %w", err)
		}
		again, err := Published(mem, addr)
		if err != nil {
			return Context{}, err
		}
		if again != published {
			continue
		}
		c, err := Decode(payload)
		c.PublishedAt = published
		return c, err
	}
	return Context{}, ErrUpdating
}

func readHeader(mem io.ReaderAt, addr uint64) ([]byte, error) {
	h := make([]byte, headerSize)
	if err := readAt(mem, h, addr); err != nil {
		return nil, fmt.Errorf("read process context header: %w", err)
	}
	if !bytes.Equal(h[:len(signature)], signature) {
		return nil, ErrSignature
	}
	if v := binary.LittleEndian.Uint32(h[offVersion:]); v != version {
		return nil, fmt.Errorf("%w: %d", ErrVersion, v)
	}
	return h, nil
}

func readAt(mem io.ReaderAt, b []byte, addr uint64) error {
	if addr > 1<<63 {
		return fmt.Errorf("address %#x out of range", addr)
	}
	n, err := mem.ReadAt(b, int64(addr))
	if n == len(b) {
		return nil
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return err
}
