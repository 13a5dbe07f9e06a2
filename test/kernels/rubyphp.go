package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// copyRubyAndPHP copies the Rubies and PHPs of the e2e tests
// (testutil.RubyVersions, testutil.PHPVersions) for a into root, at the
// paths they are unpacked at here (where the tests look for them, patched
// already: the guest has no patchelf), without their documentation, gems
// and Ruby's pure-Ruby standard library (the workloads run with
// --disable-gems and need none of it), and the check's scripts. It returns the programs and
// libraries of those that link the system's libraries (bookworm's), for
// copyLibraries; sid's bring sid's glibc and libraries with them.
func copyRubyAndPHP(root string, a *arch) ([]string, error) {
	var system []string
	for _, v := range testutil.RubyVersions {
		r, err := testutil.RubyOf(v.Suite, a.name, v.Version)
		if err != nil {
			return nil, fmt.Errorf("ruby %s for %s from Debian: %w", v.Version, a.name, err)
		}
		tree := filepath.Dir(filepath.Dir(filepath.Dir(r.Path))) // <tree>/usr/bin/ruby3.1
		if err := copyTree(root, tree, skipRubyPHP); err != nil {
			return nil, err
		}
		if v.Suite == testutil.Bookworm {
			system = append(system, r.Path, r.Lib)
		}
	}
	for _, v := range testutil.PHPVersions {
		p, err := testutil.DebianPHPOf(a.name, v)
		if err != nil {
			return nil, fmt.Errorf("php %s for %s from Debian: %w", v, a.name, err)
		}
		tree := filepath.Dir(filepath.Dir(filepath.Dir(p.Path)))
		if err := copyTree(root, tree, skipRubyPHP); err != nil {
			return nil, err
		}
		if testutil.PHPFromBookworm(v) {
			system = append(system, p.Path, filepath.Join(p.ExtensionDir, "opcache.so"))
		}
	}
	for _, script := range []string{"rubywork.rb", "phpwork.php"} {
		if err := copyFile(filepath.Join("testdata/workloads", script), filepath.Join(root, guestWorkloads[1:], script), 0o644); err != nil {
			return nil, err
		}
	}
	return system, nil
}

// skipRubyPHP says which directories of an unpacked Ruby or PHP the
// guests go without (rel: the path in the unpacked tree).
func skipRubyPHP(rel string) bool {
	return rel == "usr/share" || rel == "usr/lib/ruby" || strings.HasSuffix(rel, "/gems")
}

// copyTree copies the files, directories and symbolic links under dir
// into root at the same paths, but for the directories skip says to leave
// out (by their path relative to dir).
func copyTree(root, dir string, skip func(rel string) bool) error {
	return filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(root, path)
		switch {
		case d.IsDir():
			if rel, _ := filepath.Rel(dir, path); skip != nil && skip(rel) {
				return filepath.SkipDir
			}
			return os.MkdirAll(dst, 0o755)
		case d.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(target, dst)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			return copyFile(path, dst, info.Mode().Perm())
		}
		return nil
	})
}
