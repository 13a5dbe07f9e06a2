package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Where the collector and its default configuration are in the image, and
// what it runs. The DaemonSet's args replace Cmd and keep its feature gate.
const (
	binaryPath = "/otelcol-bpfprofiler"
	configPath = "/etc/otelcol-bpfprofiler/config.yaml"
)

var (
	entrypoint = []string{binaryPath}
	cmd        = []string{"--config=" + configPath, "--feature-gates=service.profilesSupport"}
)

// epoch is every timestamp of the image: the same inputs give the same digests.
var epoch = time.Unix(0, 0).UTC()

// Binary is one collector binary and the platform it runs on.
type Binary struct {
	Platform v1.Platform
	Path     string
}

// Spec is what an image index is built from.
type Spec struct {
	Binaries []Binary
	Config   string // the collector configuration at configPath
	Source   string // org.opencontainers.image.source
	Version  string // org.opencontainers.image.version
}

// Build returns an OCI image index with one image per binary, each a single
// layer on an empty base.
func Build(s Spec) (v1.ImageIndex, error) {
	if len(s.Binaries) == 0 {
		return nil, fmt.Errorf("no binaries")
	}
	config, err := os.ReadFile(s.Config)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	labels := map[string]string{
		"org.opencontainers.image.source":  s.Source,
		"org.opencontainers.image.version": s.Version,
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	seen := map[string]bool{}
	for _, b := range s.Binaries {
		p := b.Platform.String()
		if seen[p] {
			return nil, fmt.Errorf("%s: a second binary for %s", b.Path, p)
		}
		seen[p] = true
		img, err := platformImage(b, config, labels)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        plainImage{img},
			Descriptor: v1.Descriptor{Platform: &b.Platform},
		})
	}
	return mutate.Annotations(idx, labels).(v1.ImageIndex), nil
}

// platformImage is the image of one binary.
func platformImage(b Binary, config []byte, labels map[string]string) (v1.Image, error) {
	if err := CheckBinary(b.Path, b.Platform); err != nil {
		return nil, err
	}
	binary, err := os.ReadFile(b.Path)
	if err != nil {
		return nil, err
	}
	data, err := layerTar(binary, config)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.Path, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("%s: layer: %w", b.Path, err)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: b.Platform.Architecture,
		OS:           b.Platform.OS,
		Variant:      b.Platform.Variant,
		Created:      v1.Time{Time: epoch},
		Config:       v1.Config{Entrypoint: entrypoint, Cmd: cmd, Labels: labels},
		RootFS:       v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "tools/image: " + binaryPath + " and " + configPath},
	})
}

// plainImage is described in the index without the artifactType that
// go-containerregistry copies from the config's media type: tools that
// predate the field (skopeo 1.9) rewrite such an index, changing its digest.
type plainImage struct{ v1.Image }

func (i plainImage) Descriptor() (*v1.Descriptor, error) {
	mt, err := i.MediaType()
	if err != nil {
		return nil, err
	}
	size, err := i.Size()
	if err != nil {
		return nil, err
	}
	digest, err := i.Digest()
	if err != nil {
		return nil, err
	}
	return &v1.Descriptor{MediaType: mt, Size: size, Digest: digest}, nil
}

// layerTar is the layer's tar: the binary and the configuration, owned by
// root, at the epoch.
func layerTar(binary, config []byte) ([]byte, error) {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	entries := []struct {
		name string
		kind byte
		mode int64
		data []byte
	}{
		{"etc/", tar.TypeDir, 0o755, nil},
		{path.Dir(configPath)[1:] + "/", tar.TypeDir, 0o755, nil},
		{configPath[1:], tar.TypeReg, 0o644, config},
		{binaryPath[1:], tar.TypeReg, 0o755, binary},
	}
	for _, e := range entries {
		h := &tar.Header{
			Name: e.name, Mode: e.mode, Size: int64(len(e.data)), ModTime: epoch,
			Typeflag: e.kind, Uname: "root", Gname: "root", Format: tar.FormatUSTAR,
		}
		if err := w.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := w.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
