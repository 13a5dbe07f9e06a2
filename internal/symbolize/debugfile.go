package symbolize

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path"
	"strings"

	"go.uber.org/zap"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// Separate debug files: distributions strip the .symtab of their binaries
// and libraries (Debian's libc keeps only .dynsym, without start_thread)
// and ship it in a debug package. The debug file has the same virtual
// addresses; its .symtab names the functions the binary's tables do not.
// It is found as GDB finds it: by GNU build id under
// <debug dir>/.build-id/xx/yyyy.debug, then through the binary's
// .gnu_debuglink (a file name and the CRC-32 of the file's content) in the
// binary's directory, its .debug/ subdirectory and <debug dir>/<binary's
// directory>/. Every path is resolved inside the process's root: a process
// in a container has its own debug files, and they are hostile input like
// its binaries.

// DefaultDebugDir is where distributions install separate debug files.
const DefaultDebugDir = "/usr/lib/debug"

// debugLink is the content of a .gnu_debuglink section.
type debugLink struct {
	name string // file name of the debug file, without directory
	crc  uint32 // CRC-32 (IEEE) of the debug file's whole content
}

// maxDebugLinkName bounds the file name of a .gnu_debuglink.
const maxDebugLinkName = 255

// parseDebugLink returns the .gnu_debuglink of f: a NUL-terminated file
// name, padding to 4 bytes, and the CRC-32 in the file's byte order.
func parseDebugLink(f *elf.File, data []byte) (debugLink, bool) {
	s := f.Section(".gnu_debuglink")
	if s == nil {
		return debugLink{}, false
	}
	b, ok := sectionBytes(data, s)
	if !ok {
		return debugLink{}, false
	}
	n := bytes.IndexByte(b, 0)
	if n <= 0 || n > maxDebugLinkName {
		return debugLink{}, false
	}
	name := string(b[:n])
	crcOff := (n + 4) &^ 3
	if crcOff+4 > len(b) || name == "." || name == ".." || strings.Contains(name, "/") {
		return debugLink{}, false
	}
	return debugLink{name: name, crc: f.ByteOrder.Uint32(b[crcOff:])}, true
}

// debugCandidate is a path where the debug file of a binary may be.
type debugCandidate struct {
	path string
	link bool // found through .gnu_debuglink: its CRC must match
}

// debugCandidates returns where to look for the debug file of the binary
// at binPath (as the process sees it), in order.
func debugCandidates(buildID, binPath string, link debugLink, hasLink bool, dirs []string) []debugCandidate {
	var out []debugCandidate
	if len(buildID) > 2 {
		for _, d := range dirs {
			out = append(out, debugCandidate{path: path.Join(d, ".build-id", buildID[:2], buildID[2:]+".debug")})
		}
	}
	if !hasLink {
		return out
	}
	dir := path.Dir(binPath)
	paths := []string{path.Join(dir, link.name), path.Join(dir, ".debug", link.name)}
	for _, d := range dirs {
		paths = append(paths, path.Join(d, dir, link.name))
	}
	for _, p := range paths {
		if p != binPath { // the binary itself is not its debug file
			out = append(out, debugCandidate{path: p, link: true})
		}
	}
	return out
}

// errDebugMismatch marks a debug file that belongs to another build.
var errDebugMismatch = errors.New("debug file of another build")

// debugFile is the usable part of a separate debug file.
type debugFile struct {
	path   string // as the process sees it
	mapped *mappedFile
	symtab rawSymbols // in place in mapped
}

// parseDebugFile checks that data is the debug file of a binary with build
// id buildID (build ids must be equal when both have one; a file found
// through .gnu_debuglink must also have the CRC link.crc) and returns its
// .symtab. It may panic on a fault of a truncated mapping (the caller
// recovers, see withFaultPanic). release, when not nil, drops pages of data
// from the resident set once read (the CRC reads the whole file: a
// ClickHouse's is gigabytes).
func parseDebugFile(data []byte, release func([]byte), c debugCandidate, buildID string, link debugLink) (rawSymbols, error) {
	f, noSections, err := newELF(data)
	if err != nil {
		return rawSymbols{}, err
	}
	if noSections {
		return rawSymbols{}, errors.New("section header table unusable")
	}
	if c.link {
		if crc := checksum(data, release); crc != link.crc {
			return rawSymbols{}, fmt.Errorf("%w: CRC-32 %08x, the .gnu_debuglink of the binary says %08x", errDebugMismatch, crc, link.crc)
		}
	}
	if id := gnuBuildID(f); id != "" && buildID != "" && id != buildID {
		return rawSymbols{}, fmt.Errorf("%w: build id %s, the binary's is %s", errDebugMismatch, id, buildID)
	}
	raw, ok, err := rawSymbolSection(f, data, elf.SHT_SYMTAB)
	if err != nil {
		return rawSymbols{}, fmt.Errorf(".symtab: %w", err)
	}
	if !ok || !hasFunctionSymbols(raw) {
		return rawSymbols{}, errors.New("no function symbols in .symtab")
	}
	return raw, nil
}

// attachDebugFile looks for the separate debug file of ef, the file mapped
// from binPath by pid, and makes its .symtab the first symbol source of ef.
// Missing files are skipped silently; refused, malformed or mismatching
// ones are logged once each and skipped. Not finding one is remembered
// with ef (the search is not repeated while ef is cached).
//
// An open that does not answer in time (the debug directory on FUSE or a
// dead network file system) ends the search and every later one in the
// process: each would cost the deadline again.
func (s *Symbolizer) attachDebugFile(pid uint32, binPath string, ef *elfFile) {
	p, _ := s.procs.get(pid)
	if p != nil && p.debugStalled {
		return
	}
	var st *procfs.Status
	for _, c := range debugCandidates(ef.buildIDGNU, binPath, ef.debugLink, ef.hasDebugLink, s.debugDirs) {
		if st == nil {
			status, err := s.proc.Status(pid)
			if err != nil {
				return // the process is gone
			}
			st = &status
		}
		df, err := s.openDebugFile(pid, c, *st, ef)
		if err == nil {
			ef.debug = df
			ef.symSrc = append([]rawSymbols{df.symtab}, ef.symSrc...)
			s.stats.DebugFiles++
			s.log.Debug("function names from a debug file", zap.String("file", df.path),
				zap.String("binary", binPath), zap.Uint32("pid", pid))
			return
		}
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		s.debugFileFailed(pid, c.path, binPath, err)
		if r := procfs.RefusalReason(err); r == procfs.ReasonTimeout || r == procfs.ReasonStuck || r == procfs.ReasonBusy {
			if p != nil {
				p.debugStalled = true
			}
			return
		}
	}
}

// debugFileFailed counts and logs (once per file) a debug file that was
// refused, unreadable, malformed or of another build.
func (s *Symbolizer) debugFileFailed(pid uint32, file, binPath string, err error) {
	reason := procfs.RefusalReason(err)
	switch {
	case reason != "":
		s.countRefused(reason)
	case !errors.Is(err, errDebugMismatch):
		s.stats.FileErrors++
	}
	if !s.once.first("debugfile:" + s.proc.RootPath(pid, file)) {
		return
	}
	s.log.Info("debug file not used", zap.String("file", file), zap.String("binary", binPath),
		zap.Uint32("pid", pid), zap.String("reason", reason), zap.Error(err))
}

// openDebugFile opens candidate c inside the root of pid (under the
// deadline; refused unless a regular file on a local file system owned by
// root or the process's user), maps it and checks it belongs to ef.
func (s *Symbolizer) openDebugFile(pid uint32, c debugCandidate, st procfs.Status, ef *elfFile) (*debugFile, error) {
	name := s.proc.RootPath(pid, c.path)
	f, err := procfs.Within(s.deadline, name, func() (*os.File, error) {
		f, err := s.openInRoot(pid, c.path)
		if err != nil {
			return nil, err
		}
		if err := procfs.CheckOwner(f, st); err != nil {
			f.Close()
			return nil, err
		}
		return procfs.CheckLocal(f)
	}, closeFile)
	if err != nil {
		return nil, err
	}
	mf, err := mapOpenFile(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", name, err)
	}
	var raw rawSymbols
	if ferr := withFaultPanic(func() { raw, err = parseDebugFile(mf.data, mf.release, c, ef.buildIDGNU, ef.debugLink) }); ferr != nil {
		err = fmt.Errorf("malformed ELF: %w", ferr)
	}
	mf.releasePages()
	if err != nil {
		mf.close()
		return nil, fmt.Errorf("parse %s: %w", name, err)
	}
	return &debugFile{path: c.path, mapped: mf, symtab: raw}, nil
}

// crcChunk is how much of a file checksum reads before it releases the
// pages read: what the CRC adds to the collector's resident set.
const crcChunk = 8 << 20

// checksum is the CRC-32 (IEEE) of data, read crcChunk at a time, each
// chunk's pages released after it when release is not nil.
func checksum(data []byte, release func([]byte)) uint32 {
	var crc uint32
	for off := 0; off < len(data); off += crcChunk {
		chunk := data[off:min(off+crcChunk, len(data))]
		crc = crc32.Update(crc, crc32.IEEETable, chunk)
		if release != nil {
			release(chunk)
		}
	}
	return crc
}
