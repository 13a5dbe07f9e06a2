// Command image builds the collector's multi-arch OCI image without a
// container engine: an image index with one image per platform, each one
// layer holding that platform's static collector and the default
// configuration. It writes an OCI image layout (crane push, skopeo copy
// oci:) and with -push also pushes the index.
//
//	image -out _build/image -config deploy/collector.yaml -version 0.1.0-otelcol-v0.165.0 \
//		linux/amd64=_build/otelcol-bpfprofiler linux/arm64=_build/otelcol-bpfprofiler-arm64
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func main() {
	out := flag.String("out", "_build/image", "the OCI image layout directory to write (replaced)")
	config := flag.String("config", "deploy/collector.yaml", "the collector configuration at "+configPath)
	source := flag.String("source", "https://github.com/bpfprofiler/bpfprofiler", "org.opencontainers.image.source")
	version := flag.String("version", "", "org.opencontainers.image.version, the image's tag")
	push := flag.String("push", "", "also push the index to this reference (default keychain: docker login)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: image [flags] os/arch=binary...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(*out, *push, *config, *source, *version, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(out, push, config, source, version string, args []string) error {
	if version == "" {
		return fmt.Errorf("-version is required")
	}
	s := Spec{Config: config, Source: source, Version: version}
	for _, arg := range args {
		b, err := ParseBinary(arg)
		if err != nil {
			return err
		}
		s.Binaries = append(s.Binaries, b)
	}
	idx, err := Build(s)
	if err != nil {
		return err
	}
	if err := WriteLayout(out, idx, version); err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s: index %s for %d platforms\n", out, digest, len(s.Binaries))
	if push == "" {
		return nil
	}
	ref, err := name.ParseReference(push)
	if err != nil {
		return fmt.Errorf("-push: %w", err)
	}
	if err := remote.WriteIndex(ref, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	fmt.Printf("pushed %s@%s\n", ref, digest)
	return nil
}

// ParseBinary parses os/arch=path.
func ParseBinary(arg string) (Binary, error) {
	platform, path, ok := strings.Cut(arg, "=")
	if !ok || path == "" {
		return Binary{}, fmt.Errorf("%q: want os/arch=binary", arg)
	}
	p, err := v1.ParsePlatform(platform)
	if err != nil {
		return Binary{}, fmt.Errorf("%q: %w", arg, err)
	}
	return Binary{Platform: *p, Path: path}, nil
}

// WriteLayout replaces dir with an OCI image layout whose index.json names
// only idx (tagged tag), as crane push and skopeo copy oci: expect.
func WriteLayout(dir string, idx v1.ImageIndex, tag string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	top := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{
		Add:        idx,
		Descriptor: v1.Descriptor{Annotations: map[string]string{"org.opencontainers.image.ref.name": tag}},
	})
	if _, err := layout.Write(dir, top); err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	return nil
}
