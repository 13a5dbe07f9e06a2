package main

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testConfig = "../../deploy/collector.yaml"

// The test binaries, compiled from testdata/hello by TestMain.
var (
	amd64Binary   string // static, linux/amd64
	arm64Binary   string // static, linux/arm64
	dynamicBinary string // PIE with an interpreter, linux/amd64
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "image-test")
	if err != nil {
		panic(err)
	}
	amd64Binary, arm64Binary, dynamicBinary = filepath.Join(dir, "amd64"), filepath.Join(dir, "arm64"), filepath.Join(dir, "dynamic")
	for _, b := range []struct{ out, arch, mode string }{
		{amd64Binary, "amd64", "exe"}, {arm64Binary, "arm64", "exe"}, {dynamicBinary, "amd64", "pie"},
	} {
		cmd := exec.Command("go", "build", "-buildmode="+b.mode, "-ldflags=-s -w", "-o", b.out, "./testdata/hello")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+b.arch)
		if out, err := cmd.CombinedOutput(); err != nil {
			panic(fmt.Sprintf("build %s: %v\n%s", b.out, err, out))
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func testSpec(binaries ...Binary) Spec {
	return Spec{Binaries: binaries, Config: testConfig, Source: "https://example.com/src", Version: "1.2.3"}
}

func bin(platform, path string) Binary {
	p, err := v1.ParsePlatform(platform)
	if err != nil {
		panic(err)
	}
	return Binary{Platform: *p, Path: path}
}

func TestBuild(t *testing.T) {
	idx, err := Build(testSpec(bin("linux/amd64", amd64Binary), bin("linux/arm64", arm64Binary)))
	require.NoError(t, err)
	m, err := idx.IndexManifest()
	require.NoError(t, err)
	assert.Equal(t, types.OCIImageIndex, m.MediaType)
	labels := map[string]string{"org.opencontainers.image.source": "https://example.com/src", "org.opencontainers.image.version": "1.2.3"}
	assert.Equal(t, labels, m.Annotations)
	config, err := os.ReadFile(testConfig)
	require.NoError(t, err)

	tests := []struct {
		platform string
		binary   string
	}{
		{"linux/amd64", amd64Binary},
		{"linux/arm64", arm64Binary},
	}
	require.Len(t, m.Manifests, len(tests))
	for i, tt := range tests {
		t.Run(tt.platform, func(t *testing.T) {
			desc := m.Manifests[i]
			assert.Equal(t, tt.platform, desc.Platform.String())
			assert.Equal(t, types.OCIManifestSchema1, desc.MediaType)
			assert.Empty(t, desc.ArtifactType)
			img, err := idx.Image(desc.Digest)
			require.NoError(t, err)
			cf, err := img.ConfigFile()
			require.NoError(t, err)
			assert.Equal(t, tt.platform, cf.Platform().String())
			assert.Equal(t, []string{"/otelcol-bpfprofiler"}, cf.Config.Entrypoint)
			assert.Equal(t, []string{"--config=/etc/otelcol-bpfprofiler/config.yaml", "--feature-gates=service.profilesSupport"}, cf.Config.Cmd)
			assert.Equal(t, labels, cf.Config.Labels)
			assert.Equal(t, epoch, cf.Created.UTC())

			layers, err := img.Layers()
			require.NoError(t, err)
			require.Len(t, layers, 1)
			mt, err := layers[0].MediaType()
			require.NoError(t, err)
			assert.Equal(t, types.OCILayer, mt)
			binary, err := os.ReadFile(tt.binary)
			require.NoError(t, err)
			assert.Equal(t, []tarEntry{
				{"etc/", tar.TypeDir, 0o755, ""},
				{"etc/otelcol-bpfprofiler/", tar.TypeDir, 0o755, ""},
				{"etc/otelcol-bpfprofiler/config.yaml", tar.TypeReg, 0o644, string(config)},
				{"otelcol-bpfprofiler", tar.TypeReg, 0o755, string(binary)},
			}, readLayer(t, layers[0]))
		})
	}
}

type tarEntry struct {
	Name string
	Type byte
	Mode int64
	Data string
}

// readLayer lists the layer's entries, checking each is root's at the epoch.
func readLayer(t *testing.T, l v1.Layer) []tarEntry {
	rc, err := l.Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	var entries []tarEntry
	r := tar.NewReader(rc)
	for {
		h, err := r.Next()
		if err == io.EOF {
			return entries
		}
		require.NoError(t, err)
		data, err := io.ReadAll(r)
		require.NoError(t, err)
		assert.Equal(t, [2]int{0, 0}, [2]int{h.Uid, h.Gid}, h.Name)
		assert.True(t, h.ModTime.Equal(epoch), h.Name)
		entries = append(entries, tarEntry{h.Name, h.Typeflag, h.Mode, string(data)})
	}
}

func TestBuildReproducible(t *testing.T) {
	var digests []v1.Hash
	for range 2 {
		idx, err := Build(testSpec(bin("linux/amd64", amd64Binary), bin("linux/arm64", arm64Binary)))
		require.NoError(t, err)
		d, err := idx.Digest()
		require.NoError(t, err)
		digests = append(digests, d)
	}
	assert.Equal(t, digests[0], digests[1])
}

func TestBuildRefuses(t *testing.T) {
	tests := []struct {
		name     string
		binaries []Binary
		want     string
	}{
		{"wrong machine", []Binary{bin("linux/amd64", amd64Binary), bin("linux/arm64", amd64Binary)},
			amd64Binary + ": ELF machine is EM_X86_64, linux/arm64 needs EM_AARCH64"},
		{"dynamic", []Binary{bin("linux/amd64", dynamicBinary)},
			dynamicBinary + ": dynamically linked (interpreter /lib64/ld-linux-x86-64.so.2)"},
		{"not ELF", []Binary{bin("linux/amd64", testConfig)}, testConfig + ": not an ELF file"},
		{"missing", []Binary{bin("linux/amd64", "nonexistent")}, "nonexistent: not an ELF file"},
		{"unsupported platform", []Binary{bin("linux/riscv64", amd64Binary)}, amd64Binary + ": platform linux/riscv64 is not supported"},
		{"two of a platform", []Binary{bin("linux/amd64", amd64Binary), bin("linux/amd64", amd64Binary)},
			amd64Binary + ": a second binary for linux/amd64"},
		{"none", nil, "no binaries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Build(testSpec(tt.binaries...))
			assert.ErrorContains(t, err, tt.want)
		})
	}
}
