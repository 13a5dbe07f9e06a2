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
// (the JVM reads its classes from lib/modules).
var javaLeftOut = map[string]bool{
	"jmods": true, "include": true, "man": true, "legal": true, "docs": true, "demo": true,
	"ct.sym": true, "src.zip": true,
}

// copyJava copies Debian's OpenJDK 17 (its java launcher, libraries,
// modules image and configuration: ~180 MB) into root and compiles the
// Java workloads into the guest's workload directory, where
// testutil.JavaWorkload finds them; it returns the files whose libraries
// copyLibraries must add. Nothing when the host has no OpenJDK 17.
func copyJava(root string) ([]string, error) {
	home := testutil.OpenJDK17
	javac := filepath.Join(home, "bin", "javac")
	if _, err := os.Stat(javac); err != nil {
		return nil, nil
	}
	var elfs []string
	err := filepath.WalkDir(home, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(home, path)
		if javaLeftOut[d.Name()] || rel == "bin" {
			if d.IsDir() || rel == "bin" {
				return filepath.SkipDir
			}
			return nil
		}
		st, err := os.Stat(path) // through symlinks (conf points into /etc)
		if err != nil {
			return nil // a dangling link (cacerts without ca-certificates-java)
		}
		dst := filepath.Join(root, path)
		if st.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if strings.HasSuffix(path, ".so") {
			elfs = append(elfs, path)
		}
		return copyFile(path, dst, st.Mode().Perm())
	})
	if err != nil {
		return nil, err
	}
	java := filepath.Join(home, "bin", "java")
	if err := os.MkdirAll(filepath.Join(root, home, "bin"), 0o755); err != nil {
		return nil, err
	}
	if err := copyFile(java, filepath.Join(root, java), 0o755); err != nil {
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
	return append(elfs, java), nil
}
