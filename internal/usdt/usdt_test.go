package usdt

import (
	"debug/elf"
	"encoding/binary"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// Debian's binaries with probes, each site as binutils' readelf -n shows
// it: the same sites in the same order, with the same pc, semaphore and
// argument specs, each argument one the fetch reads but for the sites
// refused (a global variable's, by symbol: -4@NBuffers(%rip)). The files
// are those make test installs (python3.11, OpenJDK 17) and Debian's
// postgresql-15 package, unpacked by the test.
func TestProbesOfDebianBinaries(t *testing.T) {
	readelf, err := exec.LookPath("readelf")
	if err != nil {
		testutil.SkipOrFail(t, "no readelf (make test installs binutils): %v", err)
	}
	for _, c := range []struct {
		name    string
		path    func(t *testing.T) string
		sites   int
		refused []string
	}{
		{"python3.11", func(*testing.T) string { return "/usr/bin/python3.11" }, 8, nil},
		{"postgres", func(t *testing.T) string {
			return filepath.Join(testutil.DebianPackage(t, "amd64", "postgresql-15"), "usr/lib/postgresql/15/bin/postgres")
		}, 71, []string{"postgresql:checkpoint__done", "postgresql:buffer__sync__done"}},
		{"libjvm", func(*testing.T) string { return testutil.OpenJDK17Of("amd64") + "/lib/server/libjvm.so" }, 531, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := c.path(t)
			f, err := elf.Open(path)
			if err != nil {
				testutil.SkipOrFail(t, "%s: %v", path, err)
			}
			defer f.Close()
			probes, err := Probes(f)
			require.NoError(t, err)
			out, err := testutil.OutputWithin(exec.Command(readelf, "-n", path), time.Minute)
			require.NoError(t, err)
			want := readelfProbes(t, string(out))
			require.Len(t, want, c.sites, "readelf's sites")
			require.Len(t, probes, len(want))
			var refused []string
			for i, p := range probes {
				w := want[i]
				w.Offset, w.SemaphoreOffset = p.Offset, p.SemaphoreOffset // readelf shows addresses only
				require.Equal(t, w, p, "site %d", i)
				off, err := fileOffset(f, p.PC)
				require.NoError(t, err)
				require.Equal(t, off, p.Offset)
				require.NotZero(t, p.Offset)
				if _, err := ParseArgs(f.Machine, p.ArgSpecs); err != nil {
					assert.Contains(t, err.Error(), "not a number (a symbol?)")
					refused = append(refused, p.FullName())
				}
			}
			assert.Equal(t, c.refused, refused)
		})
	}
}

// readelfProbes reads the stapsdt notes of readelf -n's output.
func readelfProbes(t *testing.T, out string) []Probe {
	var probes []Probe
	hex := func(s string) uint64 {
		v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(s), "0x"), 16, 64)
		require.NoError(t, err, s)
		return v
	}
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "Provider: "):
			probes = append(probes, Probe{Provider: strings.TrimPrefix(line, "Provider: ")})
		case len(probes) == 0:
		case strings.HasPrefix(line, "Name: "):
			probes[len(probes)-1].Name = strings.TrimPrefix(line, "Name: ")
		case strings.HasPrefix(line, "Location: "):
			var loc, base, sem string
			for _, field := range strings.Split(line, ",") {
				k, v, _ := strings.Cut(strings.TrimSpace(field), ": ")
				switch k {
				case "Location":
					loc = v
				case "Base":
					base = v
				case "Semaphore":
					sem = v
				}
			}
			require.NotEmpty(t, base)
			probes[len(probes)-1].PC, probes[len(probes)-1].Semaphore = hex(loc), hex(sem)
		case strings.HasPrefix(line, "Arguments:"):
			probes[len(probes)-1].ArgSpecs = strings.TrimSpace(strings.TrimPrefix(line, "Arguments:"))
		}
	}
	return probes
}

// note builds one 64-bit little-endian stapsdt note.
func note(owner string, typ uint32, pc, base, sem uint64, strs ...string) []byte {
	desc := binary.LittleEndian.AppendUint64(nil, pc)
	desc = binary.LittleEndian.AppendUint64(desc, base)
	desc = binary.LittleEndian.AppendUint64(desc, sem)
	for _, s := range strs {
		desc = append(append(desc, s...), 0)
	}
	name := append([]byte(owner), 0)
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(name)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(desc)))
	b = binary.LittleEndian.AppendUint32(b, typ)
	b = append(b, name...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	b = append(b, desc...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func TestNotes(t *testing.T) {
	good := note("stapsdt", 3, 0x1000, 0x2000, 0x3000, "prov", "name", "8@%rdi")
	for _, c := range []struct {
		name    string
		data    []byte
		base    uint64
		want    []Probe
		wantErr string
	}{
		{"one", good, 0, []Probe{{Provider: "prov", Name: "name", PC: 0x1000, Semaphore: 0x3000, ArgSpecs: "8@%rdi"}}, ""},
		{"moved after linking", good, 0x2100, []Probe{{Provider: "prov", Name: "name", PC: 0x1100, Semaphore: 0x3100, ArgSpecs: "8@%rdi"}}, ""},
		{"other notes skipped", append(note("GNU", 3, 1, 2, 3, "a", "b", ""), good...), 0,
			[]Probe{{Provider: "prov", Name: "name", PC: 0x1000, Semaphore: 0x3000, ArgSpecs: "8@%rdi"}}, ""},
		{"none", note("GNU", 1, 1, 2, 3), 0, nil, "no USDT probes"},
		{"truncated header", good[:8], 0, nil, "header of 8 bytes"},
		{"descriptor past the end", good[:len(good)-8], 0, nil, "past the section's end"},
		{"short descriptor", note("stapsdt", 3, 1, 2, 3)[:12+8+12], 0, nil, "past the section's end"},
		{"strings not terminated", note("stapsdt", 3, 1, 2, 3, "prov"), 0, nil, "not NUL-terminated"},
		{"no name", note("stapsdt", 3, 1, 2, 3, "prov", "", ""), 0, nil, "without a provider or name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := notes(c.data, 8, binary.LittleEndian, c.base)
			if c.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}

func FuzzNotes(f *testing.F) {
	f.Add(note("stapsdt", 3, 0x1000, 0x2000, 0x3000, "prov", "name", "8@%rdi -4@$5"), uint64(0x2100))
	f.Add(note("stapsdt", 3, 1, 2, 0, "p", "n", "8@[sp, 16]"), uint64(0))
	f.Fuzz(func(t *testing.T, data []byte, base uint64) {
		probes, err := notes(data, 8, binary.LittleEndian, base)
		if err != nil {
			return
		}
		for _, p := range probes {
			if p.Provider == "" || p.Name == "" || len(p.ArgSpecs) > maxArgsLen {
				t.Fatalf("accepted %+v", p)
			}
			for _, m := range []elf.Machine{elf.EM_X86_64, elf.EM_AARCH64} {
				if args, err := ParseArgs(m, p.ArgSpecs); err == nil && len(args) > maxArgs {
					t.Fatalf("%d args", len(args))
				}
			}
		}
	})
}
