package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// debianSources are the suites whose kernels the matrix boots: bullseye
// (5.10), bookworm (6.1, and 6.12 through its security and backports
// updates).
const debianSources = `Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates bookworm-backports bullseye bullseye-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security bullseye-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`

// listsMaxAge is how long downloaded package lists are used before the next
// run refreshes them.
const listsMaxAge = 24 * time.Hour

// apt runs apt-get/apt-cache on the matrix's own sources, lists and (empty)
// dpkg status, for one architecture (under the cache directory), leaving the
// system's apt and dpkg alone.
type apt struct{ dir, arch string }

func newApt(cacheDir string, a *arch) apt {
	return apt{dir: filepath.Join(cacheDir, "apt-"+a.name), arch: a.name}
}

func (a apt) args(cmd ...string) []string {
	return append([]string{
		"-o", "Dir::Etc::sourcelist=" + filepath.Join(a.dir, "sources.sources"),
		"-o", "Dir::Etc::sourceparts=-",
		"-o", "Dir::State::Lists=" + filepath.Join(a.dir, "lists"),
		"-o", "Dir::State::status=" + filepath.Join(a.dir, "status"),
		"-o", "Dir::Cache=" + filepath.Join(a.dir, "cache"),
		"-o", "APT::Architecture=" + a.arch,
		"-o", "APT::Architectures=" + a.arch,
		"-o", "APT::Sandbox::User=root",
	}, cmd...)
}

func (a apt) run(ctx context.Context, dir, tool string, cmd ...string) ([]byte, error) {
	c := exec.CommandContext(ctx, tool, a.args(cmd...)...)
	c.Dir = dir
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s", tool, strings.Join(cmd, " "), err, stderr.String())
	}
	return out, nil
}

// update refreshes the package lists when they are missing or old.
func (a apt) update(ctx context.Context) error {
	for _, d := range []string{"lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(a.dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(a.dir, "sources.sources"), []byte(debianSources), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(a.dir, "status"), nil, 0o644); err != nil {
		return err
	}
	stamp := filepath.Join(a.dir, "lists", ".updated")
	if st, err := os.Stat(stamp); err == nil && time.Since(st.ModTime()) < listsMaxAge {
		return nil
	}
	if _, err := a.run(ctx, a.dir, "apt-get", "update"); err != nil {
		return err
	}
	return os.WriteFile(stamp, nil, 0o644)
}

// kernelPackagePattern matches Debian's generic kernel images of arch (not
// the cloud, rt, debug, unsigned or arm64-16k flavours).
func kernelPackagePattern(arch string) *regexp.Regexp {
	return regexp.MustCompile(`^linux-image-(\d+\.\d+)[.\d]*[-+][\w.+~-]*?-` + arch + `$`)
}

// kernelPackages picks the generic images of arch and series (e.g. "6.1")
// among package names, newest first.
func kernelPackages(arch, series string, names []string) ([]string, error) {
	pattern := kernelPackagePattern(arch)
	var found []string
	for _, n := range names {
		if m := pattern.FindStringSubmatch(n); m != nil && m[1] == series &&
			!strings.Contains(n, "-cloud-") && !strings.Contains(n, "-rt-") {
			found = append(found, n)
		}
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("no Debian kernel package of series %s (known: linux-image-<series>...-%s)", series, arch)
	}
	slices.SortFunc(found, func(a, b string) int { return naturalCompare(b, a) })
	return found, nil
}

// naturalCompare orders strings with runs of digits compared as numbers.
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := leadingDigits(a), leadingDigits(b)
		if da != "" && db != "" {
			na, nb := strings.TrimLeft(da, "0"), strings.TrimLeft(db, "0")
			if c := len(na) - len(nb); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[len(da):], b[len(db):]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func leadingDigits(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}

// fetchKernel returns the path of the vmlinuz of the newest package of k
// that can be downloaded, unpacking it into the cache when needed. A
// package the archive lists but does not serve (404: here arm64's 5.10
// security updates) is passed over for the next older one, said on stdout.
func fetchKernel(ctx context.Context, cacheDir string, k kernelSpec) (pkg, vmlinuz string, err error) {
	series := k.series
	a := newApt(cacheDir, k.arch)
	if err := a.update(ctx); err != nil {
		return "", "", err
	}
	out, err := a.run(ctx, a.dir, "apt-cache", "search", "--names-only", `^linux-image-`+regexp.QuoteMeta(series)+`[.-]`)
	if err != nil {
		return "", "", err
	}
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		if name, _, ok := strings.Cut(l, " - "); ok {
			names = append(names, name)
		}
	}
	pkgs, err := kernelPackages(k.arch.name, series, names)
	if err != nil {
		return "", "", err
	}
	for _, pkg := range pkgs {
		if vmlinuz, err = unpackKernel(ctx, a, cacheDir, pkg); err == nil || ctx.Err() != nil {
			return pkg, vmlinuz, err
		}
		fmt.Printf("%s: %s passed over: %v\n", k, pkg, strings.TrimSpace(lastLine(err.Error())))
	}
	return "", "", fmt.Errorf("no kernel package of %s could be fetched (%s)", k, strings.Join(pkgs, ", "))
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndex(s, "\n")+1:]
}

// unpackKernel returns the vmlinuz of pkg, downloading and unpacking the
// package into the cache when needed. arm64's (signed) vmlinuz is an
// uncompressed Image with an EFI header, which qemu boots as it is.
func unpackKernel(ctx context.Context, a apt, cacheDir, pkg string) (string, error) {
	unpacked := filepath.Join(cacheDir, pkg)
	if found, _ := filepath.Glob(filepath.Join(unpacked, "boot", "vmlinuz-*")); len(found) == 1 {
		return found[0], nil
	}
	debs := filepath.Join(cacheDir, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return "", err
	}
	deb, _ := filepath.Glob(filepath.Join(debs, pkg+"_*.deb"))
	if len(deb) == 0 {
		if _, err := a.run(ctx, debs, "apt-get", "download", pkg); err != nil {
			return "", err
		}
		if deb, _ = filepath.Glob(filepath.Join(debs, pkg+"_*.deb")); len(deb) == 0 {
			return "", fmt.Errorf("apt-get download %s left no .deb in %s", pkg, debs)
		}
	}
	tmp := unpacked + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	sh := fmt.Sprintf("dpkg-deb --fsys-tarfile %q | tar -x -C %q --wildcards './boot/vmlinuz-*'", deb[0], tmp)
	if out, err := exec.CommandContext(ctx, "sh", "-c", sh).CombinedOutput(); err != nil {
		return "", fmt.Errorf("unpack %s: %w\n%s", deb[0], err, out)
	}
	_ = os.RemoveAll(unpacked)
	if err := os.Rename(tmp, unpacked); err != nil {
		return "", err
	}
	found, _ := filepath.Glob(filepath.Join(unpacked, "boot", "vmlinuz-*"))
	if len(found) != 1 {
		return "", fmt.Errorf("%s holds %d vmlinuz files", pkg, len(found))
	}
	return found[0], nil
}
