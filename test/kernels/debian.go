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

// apt runs apt-get/apt-cache on the matrix's own sources and lists (under
// the cache directory), leaving the system's apt configuration alone.
type apt struct{ dir string }

func (a apt) args(cmd ...string) []string {
	return append([]string{
		"-o", "Dir::Etc::sourcelist=" + filepath.Join(a.dir, "sources.sources"),
		"-o", "Dir::Etc::sourceparts=-",
		"-o", "Dir::State::Lists=" + filepath.Join(a.dir, "lists"),
		"-o", "Dir::Cache=" + filepath.Join(a.dir, "cache"),
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
	stamp := filepath.Join(a.dir, "lists", ".updated")
	if st, err := os.Stat(stamp); err == nil && time.Since(st.ModTime()) < listsMaxAge {
		return nil
	}
	if _, err := a.run(ctx, a.dir, "apt-get", "update"); err != nil {
		return err
	}
	return os.WriteFile(stamp, nil, 0o644)
}

// kernelPackagePattern matches Debian's generic amd64 kernel images (not the
// cloud, rt, debug or unsigned flavours).
var kernelPackagePattern = regexp.MustCompile(`^linux-image-(\d+\.\d+)[.\d]*[-+][\w.+~-]*?-amd64$`)

// newestKernelPackage picks the newest generic image of series (e.g. "6.1")
// among package names.
func newestKernelPackage(series string, names []string) (string, error) {
	var found []string
	for _, n := range names {
		if m := kernelPackagePattern.FindStringSubmatch(n); m != nil && m[1] == series &&
			!strings.Contains(n, "-cloud-") && !strings.Contains(n, "-rt-") {
			found = append(found, n)
		}
	}
	if len(found) == 0 {
		return "", fmt.Errorf("no Debian kernel package of series %s (known: linux-image-<series>...-amd64)", series)
	}
	slices.SortFunc(found, naturalCompare)
	return found[len(found)-1], nil
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

// fetchKernel returns the path of the vmlinuz of the newest package of
// series, downloading and unpacking it into the cache when needed.
func fetchKernel(ctx context.Context, cacheDir, series string) (pkg, vmlinuz string, err error) {
	a := apt{dir: filepath.Join(cacheDir, "apt")}
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
	if pkg, err = newestKernelPackage(series, names); err != nil {
		return "", "", err
	}
	unpacked := filepath.Join(cacheDir, pkg)
	if found, _ := filepath.Glob(filepath.Join(unpacked, "boot", "vmlinuz-*")); len(found) == 1 {
		return pkg, found[0], nil
	}
	debs := filepath.Join(cacheDir, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return "", "", err
	}
	deb, _ := filepath.Glob(filepath.Join(debs, pkg+"_*.deb"))
	if len(deb) == 0 {
		if _, err := a.run(ctx, debs, "apt-get", "download", pkg); err != nil {
			return "", "", err
		}
		if deb, _ = filepath.Glob(filepath.Join(debs, pkg+"_*.deb")); len(deb) == 0 {
			return "", "", fmt.Errorf("apt-get download %s left no .deb in %s", pkg, debs)
		}
	}
	tmp := unpacked + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", "", err
	}
	sh := fmt.Sprintf("dpkg-deb --fsys-tarfile %q | tar -x -C %q --wildcards './boot/vmlinuz-*'", deb[0], tmp)
	if out, err := exec.CommandContext(ctx, "sh", "-c", sh).CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("unpack %s: %w\n%s", deb[0], err, out)
	}
	_ = os.RemoveAll(unpacked)
	if err := os.Rename(tmp, unpacked); err != nil {
		return "", "", err
	}
	found, _ := filepath.Glob(filepath.Join(unpacked, "boot", "vmlinuz-*"))
	if len(found) != 1 {
		return "", "", fmt.Errorf("%s holds %d vmlinuz files", pkg, len(found))
	}
	return pkg, found[0], nil
}
