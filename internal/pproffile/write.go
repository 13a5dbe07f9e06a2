package pproffile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// maxSuffix bounds the search for a free file name.
const maxSuffix = 10000

// Write builds p and writes it gzipped to "<dir>/<kind>-<unix seconds of
// p.End>.pb.gz" ("<kind>-<probe id>-<seconds>.pb.gz" for a probe's profile), creating dir when missing. The file appears atomically and
// never replaces an existing one: "-1", "-2", ... is appended to the name
// instead. It returns the path written.
func Write(dir string, p report.Profile) (string, error) {
	prof, err := Build(p)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create pprof directory: %w", err)
	}
	base := string(p.Kind) + "-" + strconv.FormatInt(p.End.Unix(), 10)
	if p.ProbeID != "" {
		base = string(p.Kind) + "-" + fileSafe(p.ProbeID) + "-" + strconv.FormatInt(p.End.Unix(), 10)
	}

	tmp, err := os.CreateTemp(dir, "."+base+"-*.tmp")
	if err != nil {
		return "", fmt.Errorf("create pprof file: %w", err)
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName) // no-op once linked or renamed away
	err = prof.Write(tmp)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("write pprof file %s: %w", tmpName, err)
	}

	for i := 0; i < maxSuffix; i++ {
		name := base
		if i > 0 {
			name += "-" + strconv.Itoa(i)
		}
		path := filepath.Join(dir, name+".pb.gz")
		ok, err := publish(tmpName, path)
		if err != nil {
			return "", fmt.Errorf("publish pprof file %s: %w", path, err)
		}
		if ok {
			return path, nil
		}
	}
	return "", fmt.Errorf("publish pprof file %s: no free name after %d attempts", base, maxSuffix)
}

// fileSafe replaces what a file name should not hold by '_'.
func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') {
			return r
		}
		return '_'
	}, s)
}

// publish gives the complete file tmp the name path unless path exists,
// reporting whether it did. A hard link never replaces an existing file;
// where links are not supported it falls back to check-then-rename.
func publish(tmp, path string) (bool, error) {
	err := os.Link(tmp, path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrExist):
		return false, nil
	}
	if _, serr := os.Lstat(path); serr == nil {
		return false, nil
	} else if !errors.Is(serr, fs.ErrNotExist) {
		return false, serr
	}
	if err := os.Rename(tmp, path); err != nil {
		return false, err
	}
	return true, nil
}
