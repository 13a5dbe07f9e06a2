package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// javaLeftOut are the parts of the JDK the guest's JVM does not need
// (the JVM reads its classes from lib/modules), and the libraries of
// desktop APIs that need other packages (fonts, images, sound, smart
// cards): the workloads load none of them.
var javaLeftOut = map[string]bool{
	"jmods": true, "include": true, "man": true, "legal": true, "docs": true, "demo": true,
	"ct.sym": true, "src.zip": true,
	"libfontmanager.so": true, "libjavajpeg.so": true, "libjsound.so": true, "liblcms.so": true, "libj2pcsc.so": true,
}

// copyJava copies Debian's OpenJDK 17 of u's architecture (the host's
// own, or the arm64 package unpacked into u: its java launcher, libraries,
// modules image and configuration, ~180 MB) into root and compiles the
// Java workloads with the host's javac into the guest's workload
// directory, where testutil.JavaWorkload finds them; it returns the files
// (here) whose libraries copyLibraries must add. Nothing when the host has
// no OpenJDK 17 (no javac).
func copyJava(root string, u userland) ([]string, error) {
	javac := filepath.Join(testutil.OpenJDK17, "bin", "javac")
	if _, err := os.Stat(javac); err != nil {
		return nil, nil
	}
	home := testutil.OpenJDK17Of(u.arch.name) // in the guest
	var elfs []string
	err := filepath.WalkDir(u.path(home), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(u.path(home), path)
		if javaLeftOut[d.Name()] || rel == "bin" {
			if d.IsDir() || rel == "bin" {
				return filepath.SkipDir
			}
			return nil
		}
		// Through symlinks (conf and jvm.cfg point into /etc), inside the userland.
		src := u.resolve(filepath.Join(home, rel))
		st, err := os.Stat(src)
		if err != nil {
			return nil // a dangling link (cacerts without ca-certificates-java)
		}
		dst := filepath.Join(root, home, rel)
		if st.IsDir() {
			if d.Type()&os.ModeSymlink != 0 {
				return nil // a linked directory (security's conf): not needed
			}
			return os.MkdirAll(dst, 0o755)
		}
		if strings.HasSuffix(path, ".so") {
			elfs = append(elfs, src)
		}
		return copyFile(src, dst, st.Mode().Perm())
	})
	if err != nil {
		return nil, err
	}
	java := filepath.Join(home, "bin", "java")
	if err := os.MkdirAll(filepath.Join(root, home, "bin"), 0o755); err != nil {
		return nil, err
	}
	if err := copyFile(u.resolve(java), filepath.Join(root, java), 0o755); err != nil {
		return nil, err
	}
	sources, err := filepath.Glob("testdata/workloads/*.java")
	if err != nil || len(sources) == 0 {
		return nil, fmt.Errorf("no Java workloads in testdata/workloads: %v", err)
	}
	args := append([]string{"-d", filepath.Join(root, guestWorkloads[1:])}, sources...)
	if out, err := exec.Command(javac, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("javac: %w\n%s", err, out)
	}
	return append(elfs, u.resolve(java)), nil
}

// guestNodeMajor is the node the node check runs (TestCollectorNodeFrames).
const guestNodeMajor = 22

// copyNode copies the npm registry's official node build of the check's
// major for architecture a (testutil.NodeOf fetches it once into the
// host's cache) to where testutil.Node finds it in the guest, and the
// check's script into the workload directory; it returns the binary here
// for copyLibraries.
func copyNode(root string, a *arch) ([]string, error) {
	bin, _, err := testutil.NodeOf(guestNodeMajor, a.name)
	if err != nil {
		return nil, err
	}
	// .../node/VERSION[-ARCH]/bin/node, under the guest's default cache.
	dir := filepath.Base(filepath.Dir(filepath.Dir(bin)))
	dst := filepath.Join(root, "var/cache/bpfprofiler-test/node", dir, "bin", "node")
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return nil, err
	}
	if err := copyFile(bin, dst, 0o755); err != nil {
		return nil, err
	}
	if err := copyFile("testdata/workloads/nodechain.js", filepath.Join(root, guestWorkloads[1:], "nodechain.js"), 0o644); err != nil {
		return nil, err
	}
	return []string{bin}, nil
}
