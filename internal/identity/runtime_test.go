package identity

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func openFixture(t *testing.T, name string) io.Reader {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "runtime", name))
	require.NoError(t, err)
	return strings.NewReader(string(b))
}

func TestParseRuntimeFiles(t *testing.T) {
	shop := PodNames{PodName: "shop-7d9c6b5f4-x2x9k", Namespace: "retail", PodUID: podUID1, ContainerName: "shop"}
	api := PodNames{PodName: "api-5f6d8-qwert", Namespace: "backend", PodUID: "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d", ContainerName: "api"}
	tests := []struct {
		name    string
		parse   func(io.Reader) (PodNames, error)
		fixture string
		want    PodNames
		wantErr bool
	}{
		{"containerd", ParseContainerdSpec, "containerd-config.json", shop, false},
		{"containerd sandbox", ParseContainerdSpec, "containerd-sandbox.json", PodNames{PodName: shop.PodName, Namespace: "retail", PodUID: podUID1}, false},
		{"containerd no annotations", ParseContainerdSpec, "no-annotations.json", PodNames{}, false},
		{"containerd truncated", ParseContainerdSpec, "truncated.json", PodNames{}, true},
		{"containerd wrong type", ParseContainerdSpec, "wrong-type.json", PodNames{}, true},
		{"cri-o", ParseCRIOSpec, "crio-config.json", PodNames{PodName: "web-0", Namespace: "frontend", PodUID: "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0", ContainerName: "web"}, false},
		{"cri-o no annotations", ParseCRIOSpec, "no-annotations.json", PodNames{}, false},
		{"cri-o truncated", ParseCRIOSpec, "truncated.json", PodNames{}, true},
		{"cri-o reads no containerd keys", ParseCRIOSpec, "containerd-config.json", PodNames{}, false},
		{"docker", ParseDockerConfig, "docker-config.v2.json", api, false},
		{"docker sandbox", ParseDockerConfig, "docker-sandbox.config.v2.json", PodNames{PodName: api.PodName, Namespace: "backend", PodUID: api.PodUID}, false},
		{"docker plain container", ParseDockerConfig, "docker-plain.config.v2.json", PodNames{}, false},
		{"docker truncated", ParseDockerConfig, "truncated.json", PodNames{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.parse(openFixture(t, tt.fixture))
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseRuntimeFilesEmpty(t *testing.T) {
	for _, parse := range []func(io.Reader) (PodNames, error){ParseContainerdSpec, ParseCRIOSpec, ParseDockerConfig} {
		_, err := parse(strings.NewReader(""))
		assert.Error(t, err)
	}
}

// installRuntimeFile copies a fixture to where runtime keeps the spec of
// container id below hostRoot.
func installRuntimeFile(t *testing.T, hostRoot, runtime, id, fixture string) {
	t.Helper()
	for _, rf := range runtimeFiles {
		if rf.runtime != runtime {
			continue
		}
		b, err := os.ReadFile(filepath.Join("testdata", "runtime", fixture))
		require.NoError(t, err)
		name := filepath.Join(hostRoot, rf.path(id))
		require.NoError(t, os.MkdirAll(filepath.Dir(name), 0o755))
		require.NoError(t, os.WriteFile(name, b, 0o644))
		return
	}
	t.Fatalf("no runtime %q", runtime)
}

func TestRuntimeNamesLookup(t *testing.T) {
	root := t.TempDir()
	installRuntimeFile(t, root, RuntimeContainerd, idCtrd, "containerd-config.json")
	installRuntimeFile(t, root, RuntimeCRIO, idCRIO, "crio-config.json")
	installRuntimeFile(t, root, RuntimeDocker, idDocker, "docker-config.v2.json")
	installRuntimeFile(t, root, RuntimeContainerd, idBare, "containerd-config.json")
	n := NewRuntimeNames(root, nil)

	names, rt := n.Lookup(idCtrd, RuntimeContainerd)
	assert.Equal(t, RuntimeContainerd, rt)
	assert.Equal(t, "shop", names.ContainerName)
	assert.Equal(t, "retail", names.Namespace)

	names, rt = n.Lookup(idCRIO, RuntimeCRIO)
	assert.Equal(t, RuntimeCRIO, rt)
	assert.Equal(t, "web-0", names.PodName)

	names, rt = n.Lookup(idDocker, RuntimeDocker)
	assert.Equal(t, RuntimeDocker, rt)
	assert.Equal(t, "backend", names.Namespace)

	// cgroupfs driver: the path does not name the runtime, the files do.
	names, rt = n.Lookup(idBare, "")
	assert.Equal(t, RuntimeContainerd, rt)
	assert.Equal(t, "shop", names.ContainerName)

	// The runtime the cgroup named is the only one asked.
	names, rt = n.Lookup(idPodman, RuntimeCRIO)
	assert.Equal(t, RuntimeCRIO, rt)
	assert.Equal(t, PodNames{}, names)

	// Unknown everywhere: nothing, and no runtime guessed.
	names, rt = n.Lookup(idNode, "")
	assert.Equal(t, "", rt)
	assert.Equal(t, PodNames{}, names)

	// Not an id: never turned into a path.
	names, rt = n.Lookup("../../../etc", RuntimeDocker)
	assert.Equal(t, RuntimeDocker, rt)
	assert.Equal(t, PodNames{}, names)
	assert.Zero(t, n.Errors())
}

func TestRuntimeNamesCacheAndForget(t *testing.T) {
	root := t.TempDir()
	installRuntimeFile(t, root, RuntimeContainerd, idCtrd, "containerd-config.json")
	n := NewRuntimeNames(root, nil)
	first, _ := n.Lookup(idCtrd, RuntimeContainerd)
	require.NoError(t, os.RemoveAll(filepath.Join(root, "run")))
	cachedNames, _ := n.Lookup(idCtrd, RuntimeContainerd)
	assert.Equal(t, first, cachedNames)

	n.Forget(func(string) bool { return true })
	kept, _ := n.Lookup(idCtrd, RuntimeContainerd)
	assert.Equal(t, first, kept)

	n.Forget(func(string) bool { return false })
	gone, _ := n.Lookup(idCtrd, RuntimeContainerd)
	assert.Equal(t, PodNames{}, gone)
}

func TestRuntimeNamesMalformedLoggedOnce(t *testing.T) {
	root := t.TempDir()
	installRuntimeFile(t, root, RuntimeCRIO, idCRIO, "truncated.json")
	installRuntimeFile(t, root, RuntimeContainerd, idBare, "wrong-type.json")
	core, logs := observer.New(zapcore.DebugLevel)
	n := NewRuntimeNames(root, zap.New(core))
	for range 3 {
		names, rt := n.Lookup(idCRIO, RuntimeCRIO)
		assert.Equal(t, PodNames{}, names)
		assert.Equal(t, RuntimeCRIO, rt)
	}
	names, rt := n.Lookup(idBare, "")
	assert.Equal(t, PodNames{}, names)
	assert.Equal(t, RuntimeContainerd, rt) // the file was there, so the runtime is known
	assert.Equal(t, uint64(2), n.Errors())
	warns := logs.FilterLevelExact(zapcore.WarnLevel).All()
	require.Len(t, warns, 2)
	assert.Equal(t, idCRIO, warns[0].ContextMap()["container.id"])
}

func TestRuntimeNamesDefaultRoot(t *testing.T) {
	n := NewRuntimeNames("", nil)
	assert.Equal(t, "/", n.hostRoot)
}

// Every spec Lookup reads lies in one of RuntimeStateDirs.
func TestRuntimeStateDirsHoldTheSpecs(t *testing.T) {
	root := t.TempDir()
	dirs := RuntimeStateDirs(root)
	require.Len(t, dirs, 3)
	assert.Equal(t, filepath.Join(root, "run/containerd/io.containerd.runtime.v2.task/k8s.io"), dirs[0])
	assert.Equal(t, filepath.Join(root, "var/lib/docker/containers"), dirs[2])
	for i, rf := range runtimeFiles {
		spec := filepath.Join(root, rf.path(idCtrd))
		assert.True(t, strings.HasPrefix(spec, filepath.Join(dirs[i], idCtrd)+"/"), "%s: %s not below %s", rf.runtime, spec, dirs[i])
	}
	assert.Equal(t, "/run/containers/storage/overlay-containers", RuntimeStateDirs("")[1])
}
