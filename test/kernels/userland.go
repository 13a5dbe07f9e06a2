package main

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// userland is where a payload's busybox, glibc and CPython come from: the
// machine's own files (sysroot "/") for the host's architecture, Debian
// bookworm's packages unpacked into a directory for another.
type userland struct {
	arch    *arch
	sysroot string
}

// path returns where the file the guest has at guest is here.
func (u userland) path(guest string) string { return filepath.Join(u.sysroot, guest) }

// debianUserland are the packages of a guest of another architecture than
// the host's: busybox, glibc with its debug file (libc's internal functions
// are named from it), and CPython 3.11 with its standard library and the
// libraries it links.
var debianUserland = []string{
	"busybox-static", "libc6", "libc6-dbg",
	"python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib", "zlib1g", "libexpat1",
	// The java check's JVM, and the C++ runtime it and node link.
	"openjdk-17-jre-headless", "libstdc++6", "libgcc-s1",
	// What bookworm's Ruby 3.1 and PHP 8.2 link (the ruby check's).
	"libgmp10", "libcrypt1", "libxml2", "libicu72", "liblzma5", "libssl3", "libpcre2-8-0", "libsodium23", "libargon2-1",
}

// unpackUserland downloads debianUserland for a through the matrix's apt
// (the candidate versions of its lists; the .debs are kept in the cache)
// and unpacks them into dir with dpkg-deb -x: the system's dpkg is not
// involved.
func unpackUserland(ctx context.Context, cacheDir string, a *arch, dir string) (userland, error) {
	ap := newApt(cacheDir, a)
	if err := ap.update(ctx); err != nil {
		return userland{}, err
	}
	debs := filepath.Join(cacheDir, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return userland{}, err
	}
	for _, pkg := range debianUserland {
		deb, err := ap.download(ctx, debs, pkg)
		if err != nil {
			return userland{}, err
		}
		if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", deb, dir).CombinedOutput(); err != nil {
			return userland{}, fmt.Errorf("dpkg-deb -x %s: %w\n%s", deb, err, out)
		}
	}
	return userland{arch: a, sysroot: dir}, nil
}

// download fetches the candidate .deb of pkg into dir unless it is there,
// and returns its path.
func (a apt) download(ctx context.Context, dir, pkg string) (string, error) {
	// Where the .deb is already, apt-get prints nothing: ask in a.dir.
	out, err := a.run(ctx, a.dir, "apt-get", "download", "--print-uris", pkg)
	if err != nil {
		return "", err
	}
	f := strings.Fields(string(out)) // 'uri' file size hash
	if len(f) < 2 || !strings.HasSuffix(f[1], ".deb") {
		return "", fmt.Errorf("apt-get download --print-uris %s: %q", pkg, out)
	}
	deb := filepath.Join(dir, f[1])
	if _, err := os.Stat(deb); err == nil {
		return deb, nil
	}
	if _, err := a.run(ctx, dir, "apt-get", "download", pkg); err != nil {
		return "", err
	}
	if _, err := os.Stat(deb); err != nil {
		return "", fmt.Errorf("apt-get download %s: %w", pkg, err)
	}
	return deb, nil
}

// elfLibraries returns the guest paths of the shared libraries and the
// loader that the ELF files bins need (PT_INTERP, DT_NEEDED, recursively),
// found in the multiarch directories of u: ldd's answer for files that
// cannot run here.
func (u userland) elfLibraries(bins []string) ([]string, error) {
	dirs := []string{"/lib/" + u.arch.triplet, "/usr/lib/" + u.arch.triplet}
	seen := map[string]bool{}
	loaders := map[string]bool{} // libc's DT_NEEDED of the loader is the loader
	// A library among bins themselves comes with them (the JDK's libjvm.so,
	// which its other libraries name without a RUNPATH).
	own := map[string]bool{}
	for _, b := range bins {
		own[filepath.Base(b)] = true
	}
	var libs []string
	for queue := bins; len(queue) > 0; queue = queue[1:] {
		interp, needed, err := elfDependencies(queue[0])
		if err != nil {
			return nil, err
		}
		var found []string
		if interp != "" {
			found = append(found, interp)
			loaders[filepath.Base(interp)] = true
		}
		for _, n := range needed {
			if loaders[n] || own[n] {
				continue
			}
			i := 0
			for i < len(dirs) && !exists(u.resolve(dirs[i]+"/"+n)) {
				i++
			}
			if i == len(dirs) {
				return nil, fmt.Errorf("%s needs %s, which is not in %s of %v", queue[0], n, strings.Join(dirs, " or "), debianUserland)
			}
			found = append(found, dirs[i]+"/"+n)
		}
		for _, lib := range found {
			if !seen[lib] {
				seen[lib] = true
				libs = append(libs, lib)
				queue = append(queue, u.resolve(lib))
			}
		}
	}
	return libs, nil
}

// elfDependencies returns the loader and the system libraries an ELF
// file names: not those its RUNPATH finds beside it ($ORIGIN) or in a
// directory it names, which come with the file's own package (the JDK's
// libjli.so and libjvm.so, Ruby's libruby).
func elfDependencies(path string) (interp string, needed []string, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return "", nil, fmt.Errorf("%s: PT_INTERP: %w", path, err)
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	all, err := f.ImportedLibraries()
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", path, err)
	}
	var origins []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		paths, _ := f.DynString(tag)
		for _, p := range paths {
			for _, d := range strings.Split(p, ":") {
				if rest, ok := strings.CutPrefix(d, "$ORIGIN"); ok {
					origins = append(origins, filepath.Join(filepath.Dir(path), rest))
				} else if filepath.IsAbs(d) {
					origins = append(origins, d) // a program pointed at its own libraries (testutil.RubyOf)
				}
			}
		}
	}
	for _, n := range all {
		if !slices.ContainsFunc(origins, func(d string) bool { return exists(filepath.Join(d, n)) }) {
			needed = append(needed, n)
		}
	}
	return interp, needed, nil
}

// resolve returns where the guest's file at guest is here, its symbolic
// links (absolute ones too) followed inside the sysroot.
func (u userland) resolve(guest string) string {
	for range 16 {
		target, err := os.Readlink(u.path(guest))
		if err != nil {
			break // not a link (or missing: the caller's Stat tells)
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(guest), target)
		}
		guest = target
	}
	return u.path(guest)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
