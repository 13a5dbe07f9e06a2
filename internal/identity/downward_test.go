package identity

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestDownwardFromEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want Downward
	}{
		{name: "none", env: nil, want: Downward{}},
		{
			name: "plain names",
			env:  map[string]string{"POD_NAME": "otel-x", "POD_NAMESPACE": "obs", "POD_UID": podUID1, "CONTAINER_NAME": "otelcol", "NODE_NAME": "node-1"},
			want: Downward{PodName: "otel-x", Namespace: "obs", PodUID: podUID1, ContainerName: "otelcol", NodeName: "node-1"},
		},
		{
			name: "K8S_ names",
			env:  map[string]string{"K8S_POD_NAME": "otel-x", "K8S_NAMESPACE_NAME": "obs", "K8S_POD_UID": podUID1, "K8S_CONTAINER_NAME": "otelcol", "K8S_NODE_NAME": "node-2"},
			want: Downward{PodName: "otel-x", Namespace: "obs", PodUID: podUID1, ContainerName: "otelcol", NodeName: "node-2"},
		},
		{
			name: "plain wins, blanks skipped",
			env:  map[string]string{"POD_NAME": " ", "K8S_POD_NAME": "b", "POD_NAMESPACE": "a", "K8S_POD_NAMESPACE": "z"},
			want: Downward{PodName: "b", Namespace: "a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, DownwardFromEnv(envOf(tt.env)))
		})
	}
}

func TestSelfApply(t *testing.T) {
	s := self{podUID: podUID1, containerID: idCtrd, names: Downward{PodName: "otel-x", Namespace: "obs", ContainerName: "otelcol"}}
	tests := []struct {
		name        string
		attrs       map[string]any
		podUID, cid string
		want        map[string]any
	}{
		{
			name:  "own container",
			attrs: map[string]any{}, podUID: podUID1, cid: idCtrd,
			want: map[string]any{attrkey.K8sPodName: "otel-x", attrkey.K8sNamespaceName: "obs", attrkey.K8sContainerName: "otelcol"},
		},
		{
			name:  "sibling container of the same pod: no container name",
			attrs: map[string]any{}, podUID: podUID1, cid: idCRIO,
			want: map[string]any{attrkey.K8sPodName: "otel-x", attrkey.K8sNamespaceName: "obs"},
		},
		{
			name:  "other pod",
			attrs: map[string]any{}, podUID: staticPodUID, cid: idCtrd,
			want: map[string]any{},
		},
		{
			name:  "no pod",
			attrs: map[string]any{}, podUID: "", cid: "",
			want: map[string]any{},
		},
		{
			name:  "runtime names are kept",
			attrs: map[string]any{attrkey.K8sPodName: "from-runtime"}, podUID: podUID1, cid: idCtrd,
			want: map[string]any{attrkey.K8sPodName: "from-runtime", attrkey.K8sNamespaceName: "obs", attrkey.K8sContainerName: "otelcol"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.apply(tt.attrs, tt.podUID, tt.cid)
			assert.Equal(t, tt.want, tt.attrs)
		})
	}
}

func TestSelfApplyWithoutOwnPod(t *testing.T) {
	// A collector outside any pod applies its environment to nobody, even to
	// processes that have no pod either.
	s := self{names: Downward{PodName: "otel-x", Namespace: "obs"}}
	attrs := map[string]any{}
	s.apply(attrs, "", "")
	assert.Empty(t, attrs)
}
