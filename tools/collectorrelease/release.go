// Command collectorrelease keeps every OpenTelemetry Collector module the
// project builds with at the one release collector-release.mk names: go.mod
// (and every module it pulls in), ocb's manifest, the end-to-end user
// manifest, mdatagen's module and the DaemonSet's image tag. -check fails
// naming each module at another release; -upgrade moves them all to the
// release after an edit of collector-release.mk.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

const (
	corePrefix    = "go.opentelemetry.io/collector"
	contribPrefix = "github.com/open-telemetry/opentelemetry-collector-contrib/"
	mdatagenPath  = "go.opentelemetry.io/collector/cmd/mdatagen"
)

// Release is one collector release: core modules (v0.x), stable modules
// (v1.x), contrib modules, and the mdatagen the module proxy serves.
type Release struct {
	Core, Stable, Contrib, Mdatagen string
}

// Module is a module path at a version, and where it was found.
type Module struct {
	Path, Version, Source string
}

var versionPattern = regexp.MustCompile(`^v\d+\.\d+\.\d+$`)

// ParseRelease reads collector-release.mk's `NAME := value` lines.
func ParseRelease(r io.Reader) (Release, error) {
	vars := map[string]string{}
	scanner := bufio.NewScanner(r)
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, ":=")
		if !ok {
			return Release{}, fmt.Errorf("line %q: want NAME := value", line)
		}
		vars[strings.TrimSpace(name)] = strings.TrimSpace(value)
	}
	if err := scanner.Err(); err != nil {
		return Release{}, err
	}
	rel := Release{
		Core: vars["COLLECTOR_CORE"], Stable: vars["COLLECTOR_STABLE"],
		Contrib: vars["COLLECTOR_CONTRIB"], Mdatagen: vars["MDATAGEN_VERSION"],
	}
	var errs []error
	for name, v := range map[string]string{
		"COLLECTOR_CORE": rel.Core, "COLLECTOR_STABLE": rel.Stable,
		"COLLECTOR_CONTRIB": rel.Contrib, "MDATAGEN_VERSION": rel.Mdatagen,
	} {
		if !versionPattern.MatchString(v) {
			errs = append(errs, fmt.Errorf("%s: %q is not a version vX.Y.Z", name, v))
		}
	}
	if len(errs) == 0 && (!strings.HasPrefix(rel.Core, "v0.") || !strings.HasPrefix(rel.Stable, "v1.")) {
		errs = append(errs, fmt.Errorf("COLLECTOR_CORE must be v0.x and COLLECTOR_STABLE v1.x, got %s and %s", rel.Core, rel.Stable))
	}
	return rel, errors.Join(errs...)
}

// Want is the version path must have in this release, and false for a
// module that is not the collector's.
func (r Release) Want(path, have string) (string, bool) {
	switch {
	case path == mdatagenPath:
		return r.Mdatagen, true
	case strings.HasPrefix(path, contribPrefix):
		return r.Contrib, true
	case path == corePrefix || strings.HasPrefix(path, corePrefix+"/"):
		// A module's major version says which line it follows: stable
		// modules are v1.x, the others v0.x of the same release.
		if strings.HasPrefix(have, "v1.") {
			return r.Stable, true
		}
		return r.Core, true
	}
	return "", false
}

// Check names every collector module of mods at another version than the
// release's.
func (r Release) Check(mods []Module) error {
	var errs []error
	for _, m := range mods {
		want, ok := r.Want(m.Path, m.Version)
		if ok && m.Version != want {
			errs = append(errs, fmt.Errorf("%s: %s is at %s, the release is %s", m.Source, m.Path, m.Version, want))
		}
	}
	return errors.Join(errs...)
}

// manifestSections are the lists of an ocb manifest that hold gomod entries.
var manifestSections = []string{"receivers", "processors", "exporters", "extensions", "connectors", "providers", "converters"}

// ManifestModules lists the gomod entries of an ocb manifest.
func ManifestModules(source string, data []byte) ([]Module, error) {
	var manifest map[string]any
	if err := yaml.Unmarshal(data, &manifest); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	var mods []Module
	for _, section := range manifestSections {
		entries, _ := manifest[section].([]any)
		for i, e := range entries {
			entry, _ := e.(map[string]any)
			gomod, _ := entry["gomod"].(string)
			path, version, ok := strings.Cut(strings.TrimSpace(gomod), " ")
			if !ok {
				return nil, fmt.Errorf("%s: %s[%d]::gomod: want \"module version\", got %q", source, section, i, gomod)
			}
			mods = append(mods, Module{Path: path, Version: strings.TrimSpace(version), Source: source})
		}
	}
	return mods, nil
}

// gomodLine matches a manifest's `gomod: path version` line.
var gomodLine = regexp.MustCompile(`(?m)^(\s*-?\s*gomod:\s*)(\S+)\s+(v\S+)`)

// RewriteManifest sets every collector module of an ocb manifest to the
// release, keeping the rest of the file as it is. The ocb version named in a
// comment is rewritten too.
func (r Release) RewriteManifest(data []byte) []byte {
	data = gomodLine.ReplaceAllFunc(data, func(line []byte) []byte {
		m := gomodLine.FindSubmatch(line)
		want, ok := r.Want(string(m[2]), string(m[3]))
		if !ok {
			return line
		}
		return []byte(string(m[1]) + string(m[2]) + " " + want)
	})
	builder := regexp.MustCompile(`(cmd/builder )v0\.\d+\.\d+`)
	return builder.ReplaceAll(data, []byte("${1}"+r.Core))
}

// imageTag matches the DaemonSet's image, tagged with the collector release
// it is built from.
var imageTag = regexp.MustCompile(`(image: \S+-otelcol-)(v\d+\.\d+\.\d+)`)

// CheckImage checks that the DaemonSet's image is tagged with the release.
func (r Release) CheckImage(source string, data []byte) error {
	m := imageTag.FindSubmatch(data)
	if m == nil {
		return fmt.Errorf("%s: no image tagged -otelcol-<release>", source)
	}
	if string(m[2]) != r.Core {
		return fmt.Errorf("%s: the image is tagged %s, the release is %s", source, m[2], r.Core)
	}
	return nil
}

// RewriteImage tags the DaemonSet's image with the release.
func (r Release) RewriteImage(data []byte) []byte {
	return imageTag.ReplaceAll(data, []byte("${1}"+r.Core))
}

// ParseListModules reads `go list -m all` output ("path version" lines; the
// main module has no version, a replaced one an arrow).
func ParseListModules(source string, out []byte) []Module {
	var mods []Module
	for _, line := range bytes.Split(out, []byte("\n")) {
		fields := strings.Fields(string(line))
		if len(fields) < 2 {
			continue
		}
		mods = append(mods, Module{Path: fields[0], Version: fields[1], Source: source})
	}
	return mods
}
