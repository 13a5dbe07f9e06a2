//go:build linux

package unwinder

import (
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// noPanic runs f, turning a panic of a parser on a crafted file into an
// error: the files are the profiled processes' to choose.
func noPanic(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed file: %v", r)
		}
	}()
	return f()
}

func progHeaders(f *elf.File) []elf.ProgHeader {
	out := make([]elf.ProgHeader, 0, len(f.Progs))
	for _, p := range f.Progs {
		out = append(out, p.ProgHeader)
	}
	return out
}

// bigEndian returns addr as the LPM trie compares it: the bytes of the
// address in big-endian order, read as a little-endian uint64 field.
func bigEndian(addr uint64) uint64 {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], addr)
	return binary.LittleEndian.Uint64(b[:])
}

// fingerprint hashes the executable mappings of maps (FNV-1a).
func fingerprint(maps []procfs.Map) uint64 {
	h := uint64(14695981039346656037)
	mix := func(v uint64) {
		for range 8 {
			h ^= v & 0xff
			h *= 1099511628211
			v >>= 8
		}
	}
	for _, m := range maps {
		if m.Executable() {
			mix(m.Start)
			mix(m.End)
			mix(m.Offset)
			mix(m.Inode)
		}
	}
	return h
}

// buildID returns the GNU build id of f in hex, or "" (none, or unreadable).
func buildID(f *elf.File) string {
	s := f.Section(".note.gnu.build-id")
	if s == nil || s.Size > 1024 {
		return ""
	}
	note, err := s.Data()
	if err != nil || len(note) < 16 {
		return ""
	}
	namesz, descsz := f.ByteOrder.Uint32(note[0:4]), f.ByteOrder.Uint32(note[4:8])
	desc := 12 + (uint64(namesz)+3)&^3
	if namesz != 4 || string(note[12:15]) != "GNU" || desc+uint64(descsz) > uint64(len(note)) || descsz == 0 {
		return ""
	}
	return hex.EncodeToString(note[desc : desc+uint64(descsz)])
}

// MappedBias returns the load bias of f in a process that maps its
// executable segment at m: the loader's, for what others read of a
// process as it does.
func MappedBias(f *elf.File, m procfs.Map) (uint64, error) {
	return loadBias(progHeaders(f), m.Start, m.Offset)
}
