package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The files the release is checked in, relative to the repository root.
const (
	releaseFile  = "collector-release.mk"
	mdatagenDir  = "tools/mdatagen"
	userManifest = "test/e2e/testdata/user-manifest.yaml"
	daemonSet    = "deploy/kubernetes/daemonset.yaml"
)

var manifests = []string{"builder-config.yaml", userManifest, "bench/gateway-builder.yaml"}

func main() {
	check := flag.Bool("check", false, "fail naming every collector module at another release")
	upgrade := flag.Bool("upgrade", false, "move every collector module to the release of "+releaseFile)
	module := flag.String("check-module", "", "check only the modules of the Go module in this directory (an ocb build's output)")
	root := flag.String("root", ".", "the repository root")
	flag.Parse()
	var err error
	switch {
	case *module != "" && !*check && !*upgrade:
		err = CheckModule(*root, *module)
	case *check && !*upgrade && *module == "":
		err = Check(*root)
	case *upgrade && !*check && *module == "":
		err = Upgrade(*root)
	default:
		fmt.Fprintln(os.Stderr, "collectorrelease: give one of -check, -upgrade or -check-module DIR")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "collectorrelease:", err)
		os.Exit(1)
	}
}

func loadRelease(root string) (Release, error) {
	f, err := os.Open(filepath.Join(root, releaseFile))
	if err != nil {
		return Release{}, err
	}
	defer f.Close()
	rel, err := ParseRelease(f)
	if err != nil {
		return Release{}, fmt.Errorf("%s: %w", releaseFile, err)
	}
	return rel, nil
}

// Check checks every place a collector module is named.
func Check(root string) error {
	rel, err := loadRelease(root)
	if err != nil {
		return err
	}
	var mods []Module
	out, err := goCommand(root, "list", "-m", "all")
	if err != nil {
		return err
	}
	mods = append(mods, ParseListModules("go.mod (go list -m all)", out)...)
	out, err = goCommand(filepath.Join(root, mdatagenDir), "list", "-m", mdatagenPath)
	if err != nil {
		return err
	}
	mods = append(mods, ParseListModules(mdatagenDir+"/go.mod", out)...)
	for _, name := range manifests {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			return err
		}
		m, err := ManifestModules(name, data)
		if err != nil {
			return err
		}
		mods = append(mods, m...)
	}
	image, err := os.ReadFile(filepath.Join(root, daemonSet))
	if err != nil {
		return err
	}
	if err := errors.Join(rel.Check(mods), rel.CheckImage(daemonSet, image)); err != nil {
		return err
	}
	fmt.Printf("every collector module at %s / %s, contrib %s (mdatagen %s)\n", rel.Core, rel.Stable, rel.Contrib, rel.Mdatagen)
	return nil
}

// CheckModule checks every module the Go module in dir uses (`go list -m
// all`), e.g. the collector ocb generated from a user's manifest.
func CheckModule(root, dir string) error {
	rel, err := loadRelease(root)
	if err != nil {
		return err
	}
	out, err := goCommand(dir, "list", "-m", "all")
	if err != nil {
		return err
	}
	mods := ParseListModules(filepath.Join(dir, "go.mod"), out)
	if err := rel.Check(mods); err != nil {
		return err
	}
	fmt.Printf("%d modules of %s, every collector module at %s / %s, contrib %s\n", len(mods), dir, rel.Core, rel.Stable, rel.Contrib)
	return nil
}

// Upgrade rewrites the manifests and moves go.mod's and mdatagen's collector
// modules to the release (go get, go mod tidy).
func Upgrade(root string) error {
	rel, err := loadRelease(root)
	if err != nil {
		return err
	}
	for _, name := range manifests {
		path := filepath.Join(root, name)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.WriteFile(path, rel.RewriteManifest(data), 0o644); err != nil {
			return err
		}
	}
	path := filepath.Join(root, daemonSet)
	image, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, rel.RewriteImage(image), 0o644); err != nil {
		return err
	}
	out, err := goCommand(root, "mod", "edit", "-json")
	if err != nil {
		return err
	}
	direct, err := requiredModules(out)
	if err != nil {
		return err
	}
	var targets []string
	for _, m := range direct {
		if want, ok := rel.Want(m.Path, m.Version); ok && want != m.Version {
			targets = append(targets, m.Path+"@"+want)
		}
	}
	if len(targets) > 0 {
		if _, err := goCommand(root, append([]string{"get"}, targets...)...); err != nil {
			return err
		}
	}
	if _, err := goCommand(root, "mod", "tidy"); err != nil {
		return err
	}
	dir := filepath.Join(root, mdatagenDir)
	if _, err := goCommand(dir, "get", mdatagenPath+"@"+rel.Mdatagen); err != nil {
		return err
	}
	_, err = goCommand(dir, "mod", "tidy")
	return err
}

func goCommand(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s in %s: %w: %s", strings.Join(args, " "), dir, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// requiredModules reads the require list of `go mod edit -json`.
func requiredModules(out []byte) ([]Module, error) {
	var mod struct {
		Require []struct{ Path, Version string }
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		return nil, fmt.Errorf("go mod edit -json: %w", err)
	}
	mods := make([]Module, 0, len(mod.Require))
	for _, r := range mod.Require {
		mods = append(mods, Module{Path: r.Path, Version: r.Version, Source: "go.mod"})
	}
	return mods, nil
}
