package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseBinary(t *testing.T) {
	tests := []struct {
		arg     string
		want    string
		wantErr string
	}{
		{arg: "linux/amd64=_build/otelcol", want: "linux/amd64 _build/otelcol"},
		{arg: "linux/arm64/v8=a=b", want: "linux/arm64/v8 a=b"},
		{arg: "linux/amd64", wantErr: `"linux/amd64": want os/arch=binary`},
		{arg: "linux/amd64=", wantErr: "want os/arch=binary"},
		{arg: "linux/amd64/v3/x=bin", wantErr: `"linux/amd64/v3/x=bin": `},
	}
	for _, tt := range tests {
		t.Run(tt.arg, func(t *testing.T) {
			b, err := ParseBinary(tt.arg)
			if tt.wantErr != "" {
				assert.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, b.Platform.String()+" "+b.Path)
		})
	}
}

func TestWriteLayout(t *testing.T) {
	idx, err := Build(testSpec(bin("linux/amd64", amd64Binary), bin("linux/arm64", arm64Binary)))
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "image")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "blobs", "stale"), 0o755))
	require.NoError(t, WriteLayout(dir, idx, "1.2.3"))
	assert.NoDirExists(t, filepath.Join(dir, "blobs", "stale"))

	// index.json names only the image index, as crane push expects.
	l, err := layout.ImageIndexFromPath(dir)
	require.NoError(t, err)
	top, err := l.IndexManifest()
	require.NoError(t, err)
	require.Len(t, top.Manifests, 1)
	desc := top.Manifests[0]
	assert.Equal(t, types.OCIImageIndex, desc.MediaType)
	assert.Equal(t, "1.2.3", desc.Annotations["org.opencontainers.image.ref.name"])
	want, err := idx.Digest()
	require.NoError(t, err)
	assert.Equal(t, want, desc.Digest)

	read, err := l.ImageIndex(desc.Digest)
	require.NoError(t, err)
	require.NoError(t, validate.Index(read))
	m, err := read.IndexManifest()
	require.NoError(t, err)
	var platforms []string
	for _, d := range m.Manifests {
		platforms = append(platforms, d.Platform.String())
	}
	assert.Equal(t, []string{"linux/amd64", "linux/arm64"}, platforms)
}

// The DaemonSet's args replace the image's Cmd: they keep its flags but the
// configuration file (the DaemonSet mounts its own).
func TestDaemonSetArgs(t *testing.T) {
	ds, err := os.ReadFile("../../deploy/kubernetes/daemonset.yaml")
	require.NoError(t, err)
	for _, arg := range cmd {
		if !strings.HasPrefix(arg, "--config=") {
			assert.Contains(t, string(ds), "- "+arg+"\n")
		}
	}
}
