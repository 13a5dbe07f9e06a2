package processctx

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

const base = 0x7f0000000000

// memory is a process's memory: bytes at base; reads tick, and a read
// of the header's timestamp may see what update says.
type memory struct {
	b      []byte
	reads  int
	update func(reads int, b []byte)
}

func (m *memory) ReadAt(p []byte, off int64) (int, error) {
	m.reads++
	if m.update != nil {
		m.update(m.reads, m.b)
	}
	if off < base || off-base >= int64(len(m.b)) {
		return 0, errors.New("input/output error")
	}
	return copy(p, m.b[off-base:]), nil
}

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

// payload encodes a ProcessContext as an SDK does.
func payload(t *testing.T, resource []*commonpb.KeyValue, attrs ...*commonpb.KeyValue) []byte {
	t.Helper()
	r, err := proto.Marshal(&resourcepb.Resource{Attributes: resource})
	require.NoError(t, err)
	out := protowire.AppendTag(nil, fieldResource, protowire.BytesType)
	out = protowire.AppendBytes(out, r)
	for _, kv := range attrs {
		b, err := proto.Marshal(kv)
		require.NoError(t, err)
		out = protowire.AppendTag(out, fieldAttributes, protowire.BytesType)
		out = protowire.AppendBytes(out, b)
	}
	return out
}

// published lays out a header at base and the payload after it.
func published(p []byte, version uint32, at uint64) []byte {
	b := make([]byte, headerSize+len(p))
	copy(b, "OTEL_CTX")
	binary.LittleEndian.PutUint32(b[offVersion:], version)
	binary.LittleEndian.PutUint32(b[offPayloadSize:], uint32(len(p)))
	binary.LittleEndian.PutUint64(b[offPublished:], at)
	binary.LittleEndian.PutUint64(b[offPayload:], base+headerSize)
	copy(b[headerSize:], p)
	return b
}

func TestRead(t *testing.T) {
	keyMap := &commonpb.KeyValue{Key: "threadlocal.attribute_key_map", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{
		ArrayValue: &commonpb.ArrayValue{Values: []*commonpb.AnyValue{
			{Value: &commonpb.AnyValue_StringValue{StringValue: "http.route"}},
			{Value: &commonpb.AnyValue_StringValue{StringValue: "http.request.method"}},
		}},
	}}}
	good := payload(t, []*commonpb.KeyValue{str("service.name", "checkout"), str("service.instance.id", "6f1c"),
		{Key: "process.pid", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: 1}}},
		{Key: "nested", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{}}}},
		str("threadlocal.schema_version", "tlsdesc_v1_dev"), keyMap)
	setPublished := func(b []byte, at uint64) { binary.LittleEndian.PutUint64(b[offPublished:], at) }

	tests := []struct {
		name   string
		mem    *memory
		want   Context
		err    error
		reads  int
		errMsg string
	}{
		{name: "published", mem: &memory{b: published(good, 2, 77)}, reads: 3, want: Context{
			PublishedAt: 77,
			Resource:    map[string]any{"service.name": "checkout", "service.instance.id": "6f1c", "process.pid": int64(1)},
			Attributes:  map[string]any{"threadlocal.schema_version": "tlsdesc_v1_dev", "threadlocal.attribute_key_map": []string{"http.route", "http.request.method"}},
		}},
		{name: "no signature", mem: &memory{b: append([]byte("OTEL_CTY"), published(good, 2, 77)[8:]...)}, err: ErrSignature},
		{name: "development version", mem: &memory{b: published(good, 1, 77)}, err: ErrVersion},
		{name: "payload too large", mem: &memory{b: func() []byte {
			b := published(good, 2, 77)
			binary.LittleEndian.PutUint32(b[offPayloadSize:], MaxPayload+1)
			return b
		}()}, err: ErrSize},
		{name: "payload out of the process", mem: &memory{b: func() []byte {
			b := published(good, 2, 77)
			binary.LittleEndian.PutUint64(b[offPayload:], 1<<63+5)
			return b
		}()}, errMsg: "out of range"},
		{name: "always being updated", mem: &memory{b: published(good, 2, 0)}, err: ErrUpdating},
		{name: "updated while read, then read whole", mem: &memory{b: published(good, 2, 77), update: func(reads int, b []byte) {
			if reads == 3 { // the check after the first payload read
				setPublished(b, 78)
			}
		}}, reads: 6, want: Context{PublishedAt: 78,
			Resource:   map[string]any{"service.name": "checkout", "service.instance.id": "6f1c", "process.pid": int64(1)},
			Attributes: map[string]any{"threadlocal.schema_version": "tlsdesc_v1_dev", "threadlocal.attribute_key_map": []string{"http.route", "http.request.method"}},
		}},
		{name: "updated at every read", mem: &memory{b: published(good, 2, 77), update: func(reads int, b []byte) {
			setPublished(b, uint64(100+reads))
		}}, err: ErrUpdating},
		{name: "malformed payload", mem: &memory{b: published([]byte{0x0a, 0x7f, 1}, 2, 5)}, err: ErrPayload},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Read(tt.mem, base)
			switch {
			case tt.err != nil:
				assert.ErrorIs(t, err, tt.err)
			case tt.errMsg != "":
				assert.ErrorContains(t, err, tt.errMsg)
			default:
				require.NoError(t, err)
				assert.Equal(t, tt.want, got)
				assert.Equal(t, tt.reads, tt.mem.reads, "reads of the process's memory")
			}
		})
	}
}

func TestFind(t *testing.T) {
	tests := []struct {
		name string
		path string
		size uint64
		ok   bool
	}{
		{"memfd and prctl", "[anon_shmem:OTEL_CTX]", 4096, true},
		{"prctl only", "[anon:OTEL_CTX]", 4096, true},
		{"memfd only", "/memfd:OTEL_CTX (deleted)", 4096, true},
		{"another name", "[anon:OTEL_CTXX]", 4096, false},
		{"another memfd", "/memfd:jit-cache (deleted)", 4096, false},
		{"anonymous", "", 4096, false},
		{"smaller than a header", "[anon:OTEL_CTX]", 16, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			maps := []procfs.Map{{Start: 0x1000, End: 0x2000, Path: "/usr/bin/app"}, {Start: base, End: base + tt.size, Path: tt.path}}
			addr, ok := Find(maps)
			assert.Equal(t, tt.ok, ok)
			if ok {
				assert.Equal(t, uint64(base), addr)
			}
		})
	}
}

func TestDecodeBounds(t *testing.T) {
	var kvs []*commonpb.KeyValue
	for i := range MaxAttributes + 10 {
		kvs = append(kvs, str(string(rune('a'+i%26))+string(rune('A'+i/26)), "v"))
	}
	c, err := Decode(payload(t, kvs))
	require.NoError(t, err)
	assert.Len(t, c.Resource, MaxAttributes)
}
