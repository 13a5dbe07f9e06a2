package identity

import (
	"encoding/binary"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

const ctxAddr = 0x10000 // where the fake processes map their context

// publish writes pid's maps and memory as an SDK's publication leaves
// them: the OTEL_CTX mapping with its header at ctxAddr, the payload after it.
func publish(t *testing.T, proc procfs.FS, pid uint32, at uint64, resource map[string]string) {
	t.Helper()
	var kvs []*commonpb.KeyValue
	for k, v := range resource {
		kvs = append(kvs, &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}})
	}
	r, err := proto.Marshal(&resourcepb.Resource{Attributes: kvs})
	require.NoError(t, err)
	payload := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), r)
	mem := make([]byte, ctxAddr+32+len(payload))
	h := mem[ctxAddr:]
	copy(h, "OTEL_CTX")
	binary.LittleEndian.PutUint32(h[8:], 2)
	binary.LittleEndian.PutUint32(h[12:], uint32(len(payload)))
	binary.LittleEndian.PutUint64(h[16:], at)
	binary.LittleEndian.PutUint64(h[24:], ctxAddr+32)
	copy(h[32:], payload)
	require.NoError(t, os.WriteFile(proc.Path(pid, "mem"), mem, 0o600))
	maps := fmt.Sprintf("00400000-00401000 r-xp 00000000 08:01 12 /usr/bin/shop\n%08x-%08x rw-s 00000000 00:01 2048 /memfd:OTEL_CTX (deleted)\n", ctxAddr, ctxAddr+0x1000)
	require.NoError(t, os.WriteFile(proc.Path(pid, "maps"), []byte(maps), 0o600))
}

func TestResolverAppliesProcessContext(t *testing.T) {
	proc, host := fakeNode(t)
	now := time.Unix(1000, 0)
	r := New(Options{Proc: proc, HostName: "node-1", HostRoot: host, Env: collectorEnv, SelfPID: 1,
		ProcessContexts: true, Now: func() time.Time { return now }})
	require.NoError(t, os.WriteFile(proc.Path(103, "maps"), []byte("00400000-00401000 r-xp 00000000 08:01 12 /usr/sbin/nginx\n"), 0o600))
	publish(t, proc, 100, 5, map[string]string{attrkey.ServiceName: "checkout", "service.instance.id": "6f1c",
		"deployment.environment.name": "prod", attrkey.ProcessPID: "1", attrkey.K8sPodName: "sdk-thinks"})

	resolve := func(pid uint32) map[string]any {
		id, err := r.Resolve(pid)
		require.NoError(t, err)
		return id.Attributes
	}
	got := resolve(100)
	assert.Equal(t, "checkout", got[attrkey.ServiceName], "the SDK's service.name wins over the container's name")
	assert.Equal(t, "6f1c", got["service.instance.id"])
	assert.Equal(t, "prod", got["deployment.environment.name"])
	assert.Equal(t, int64(100), got[attrkey.ProcessPID], "the pid this node sees, not the SDK's namespace's")
	assert.Equal(t, "shop-7d9c6b5f4-x2x9k", got[attrkey.K8sPodName], "observed Kubernetes names win")
	assert.Equal(t, "nginx", resolve(103)[attrkey.ServiceName], "no context: inferred")

	// A process that publishes after its first samples is found at a rescan.
	publish(t, proc, 103, 9, map[string]string{attrkey.ServiceName: "edge-proxy"})
	now = now.Add(contextRescanFirst / 2)
	assert.Equal(t, "nginx", resolve(103)[attrkey.ServiceName], "not yet looked at again")
	now = now.Add(contextRescanFirst / 2)
	assert.Equal(t, "edge-proxy", resolve(103)[attrkey.ServiceName])

	// A new publication is seen at the next poll, not before.
	assert.Equal(t, "checkout", resolve(100)[attrkey.ServiceName]) // polled: unchanged
	publish(t, proc, 100, 6, map[string]string{attrkey.ServiceName: "checkout-v2"})
	now = now.Add(contextPoll / 2)
	assert.Equal(t, "checkout", resolve(100)[attrkey.ServiceName])
	now = now.Add(contextPoll / 2)
	got = resolve(100)
	assert.Equal(t, "checkout-v2", got[attrkey.ServiceName])
	assert.NotContains(t, got, "service.instance.id", "a publication replaces the last one whole")

	// A malformed publication is counted, and the last good one kept.
	mem, err := os.ReadFile(proc.Path(100, "mem"))
	require.NoError(t, err)
	binary.LittleEndian.PutUint64(mem[ctxAddr+16:], 7)
	binary.LittleEndian.PutUint32(mem[ctxAddr+12:], 1<<20)
	require.NoError(t, os.WriteFile(proc.Path(100, "mem"), mem, 0o600))
	now = now.Add(contextPoll)
	assert.Equal(t, "checkout-v2", resolve(100)[attrkey.ServiceName])
	assert.Equal(t, ContextStats{Read: 3, Failed: map[string]uint64{ContextMalformed: 1}}, r.ContextStats())

	// Exec'ed: the context is the new program's to publish.
	r.Forget(100)
	require.NoError(t, os.Remove(proc.Path(100, "maps")))
	assert.Equal(t, "shop", resolve(100)[attrkey.ServiceName])
}

func TestResolverWithoutProcessContexts(t *testing.T) {
	proc, host := fakeNode(t)
	publish(t, proc, 100, 5, map[string]string{attrkey.ServiceName: "checkout"})
	r := New(Options{Proc: proc, HostRoot: host, Env: collectorEnv, SelfPID: 1})
	id, err := r.Resolve(100)
	require.NoError(t, err)
	assert.Equal(t, "shop", id.Attributes[attrkey.ServiceName])
	assert.Equal(t, ContextStats{}, r.ContextStats())
}
