package cfi

import (
	"bufio"
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// oracleFiles are real binaries nobody here wrote; a missing one is skipped.
func oracleFiles() []string {
	files := []string{
		"/usr/bin/xz",
		"/usr/lib/x86_64-linux-gnu/liblzma.so.5",
		"/lib/x86_64-linux-gnu/libc.so.6",
		"/usr/bin/gzip",
	}
	for _, pattern := range []string{
		"/root/.pyenv/versions/3.11*/bin/python3.11",
		"/root/.pyenv/versions/3.11*/lib/libpython3.11.so.1.0",
	} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			files = append(files, m[len(m)-1])
		} else {
			files = append(files, pattern)
		}
	}
	return files
}

// TestReadelfOracle compares Build with binutils' readelf --debug-dump=
// frames-interp: at every readelf row whose CFA is rsp+N or rbp+N, Lookup
// must give the same CFA, rbp save slot and return address slot (or
// KindStop where the return address is undefined).
func TestReadelfOracle(t *testing.T) {
	readelf := requireReadelf(t)
	for _, path := range oracleFiles() {
		t.Run(filepath.Base(path), func(t *testing.T) {
			if _, err := os.Stat(path); err != nil {
				testutil.SkipOrFail(t, "%s: %v", path, err)
			}
			checkAgainstReadelf(t, readelf, path)
		})
	}
}

// TestReadelfOracleDebugFrame builds a binary whose functions are described
// partly by .eh_frame and partly by .debug_frame only.
func TestReadelfOracleDebugFrame(t *testing.T) {
	readelf := requireReadelf(t)
	if _, err := exec.LookPath("cc"); err != nil {
		testutil.SkipOrFail(t, "no C compiler")
	}
	dir := t.TempDir()
	src := map[string]string{
		"a.c": "int leaf(int x) { return x * 3; }\n" +
			"int twice(int (*f)(int), int x) { volatile int y = f(x); return f(y) + 1; }\n",
		"b.c": "#include <stdio.h>\nint twice(int (*)(int), int);\nint leaf(int);\n" +
			"int main(int argc, char **argv) { printf(\"%d\\n\", twice(leaf, argc)); return 0; }\n",
	}
	for name, text := range src {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	bin := filepath.Join(dir, "mixed")
	steps := [][]string{
		{"cc", "-O2", "-g", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-c", "-o", filepath.Join(dir, "a.o"), filepath.Join(dir, "a.c")},
		{"cc", "-O0", "-g", "-c", "-o", filepath.Join(dir, "b.o"), filepath.Join(dir, "b.c")},
		{"cc", "-o", bin, filepath.Join(dir, "a.o"), filepath.Join(dir, "b.o")},
	}
	for _, args := range steps {
		out, err := testutil.RunWithin(exec.Command(args[0], args[1:]...), testutil.Patient(testutil.BuildTimeout))
		require.NoError(t, err, "%v: %s", args, out)
	}
	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	require.NotNil(t, f.Section(".debug_frame"), "the compiler emitted no .debug_frame")
	checked := checkAgainstReadelf(t, readelf, bin)
	require.NotZero(t, checked[".debug_frame"], "no .debug_frame row compared")
	require.NotZero(t, checked[".eh_frame"], "no .eh_frame row compared")
}

func requireReadelf(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("readelf")
	if err != nil {
		testutil.SkipOrFail(t, "readelf (binutils) not found (%s=1 makes this a failure)", testutil.RequireBPFEnv)
	}
	return path
}

// checkAgainstReadelf returns how many rows it compared, by section.
func checkAgainstReadelf(t *testing.T, readelf, path string) map[string]int {
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var table *Table
	took := time.Duration(1<<63 - 1)
	for range 3 { // the best of three, on a busy machine
		began := time.Now()
		table, err = Build(f)
		took = min(took, time.Since(began))
		require.NoError(t, err)
	}
	checkInvariants(t, table)

	out, err := testutil.OutputWithin(exec.Command(readelf, "--debug-dump=frames-interp", "--debug-dump=no-follow-links", path), testutil.Patient(2*time.Minute))
	require.NoError(t, err)
	fdes := parseReadelf(t, out)
	regs, ok := readelfArches[f.Machine]
	require.True(t, ok, "%s: %v", path, f.Machine)
	if regs.raLink {
		markUndefinedRA(t, readelf, path, fdes)
	}
	b := builder{exec: executableRanges(f)}
	checked, unsupported, excluded := 0, 0, 0
	bySection := map[string]int{}
	for _, fde := range fdes {
		if !b.executable(fde.start, fde.end) || overlapsOther(fde, fdes) {
			excluded++
			continue
		}
		for _, row := range fde.rows {
			if row.pc < fde.start || row.pc >= fde.end {
				continue
			}
			got := table.Lookup(row.pc)
			got.PC = 0
			if row.cfa == "exp" {
				requireKnownExpression(t, got, row)
				checked++
				bySection[fde.section]++
				continue
			}
			want, ok := row.expected(regs)
			if !ok {
				continue
			}
			require.Equal(t, want, got, "%s: %s FDE %#x..%#x, row at %#x: %s", path, fde.section, fde.start, fde.end, row.pc, row.line)
			checked++
			bySection[fde.section]++
			if got.Kind == KindUnsupported {
				unsupported++
			}
		}
	}
	require.NotZero(t, checked)
	s := table.Stats
	total := len(table.Rows)
	t.Logf("%s: compared %d readelf rows (%d unsupported) of %d FDEs (%d excluded: outside text or overlapping); built in %v: %d rows (%d KiB at 16 B/row), FDEs %d (bad programs %d), skipped %v",
		path, checked, unsupported, len(fdes), excluded, took.Round(10*time.Microsecond), total, total*16/1024, s.FDEs, s.BadPrograms, skipSummary(s))
	var kinds []string
	for k, n := range s.Rows {
		kinds = append(kinds, Kind(k).String()+"="+strconv.Itoa(n))
	}
	t.Logf("%s: rows by kind %s; unsupported %.2f%% of rows", path, strings.Join(kinds, " "),
		100*float64(s.Rows[KindUnsupported])/float64(max(total, 1)))
	return bySection
}

func skipSummary(s Stats) string {
	var parts []string
	for r, n := range s.Skipped {
		if n > 0 {
			parts = append(parts, SkipReason(r).String()+"="+strconv.Itoa(n))
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// checkInvariants checks that rows are sorted and merged.
func checkInvariants(t *testing.T, table *Table) {
	t.Helper()
	for i := 1; i < len(table.Rows); i++ {
		prev, cur := table.Rows[i-1], table.Rows[i]
		require.Less(t, prev.PC, cur.PC, "row %d", i)
		require.False(t, sameRule(prev, cur), "rows %d and %d alike: %+v", i-1, i, cur)
	}
	if n := len(table.Rows); n > 0 {
		require.Equal(t, KindNoCFI, table.Rows[n-1].Kind)
	}
}

// readelfFDE is one FDE of readelf's output, with its rows (for an FDE
// without instructions readelf prints none: its CIE's row stands in).
type readelfFDE struct {
	section    string
	start, end uint64
	rows       []readelfRow
}

type readelfRow struct {
	pc   uint64
	cfa  string
	regs map[string]string
	line string
	// raUndefined: "u" in the ra column is DW_CFA_undefined (markUndefinedRA)
	raUndefined bool
}

// readelfRegs are readelf's names of a machine's stack and frame pointers,
// and whether a return address without a rule is in the link register:
// then "u" (readelf's mark of a register no instruction mentioned, as well
// as of an undefined one), "s" and no ra column say it is.
type readelfRegs struct {
	sp, fp string
	raLink bool
}

var readelfArches = map[elf.Machine]readelfRegs{
	elf.EM_X86_64:  {sp: "rsp", fp: "rbp"},
	elf.EM_AARCH64: {sp: "sp", fp: "x29", raLink: true},
}

var (
	reSection = regexp.MustCompile(`^Contents of the (\.\w+) section`)
	reEntry   = regexp.MustCompile(`^([0-9a-f]+) [0-9a-f]+ [0-9a-f]+ (CIE|FDE)(?: cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+))?`)
	reRow     = regexp.MustCompile(`^([0-9a-f]{16}) `)
	reCell    = regexp.MustCompile(`r\d+ \(\w+\)|\S+`)
	reCFA     = regexp.MustCompile(`^(\w+)\+(\d+)$`)
	reSlot    = regexp.MustCompile(`^c([+-]\d+)$`)
)

func parseReadelf(t *testing.T, out []byte) []*readelfFDE {
	var (
		fdes    []*readelfFDE
		section string
		cols    []string
		cieRows = map[string]map[string][]readelfRow{} // section -> CIE offset -> rows
		cur     *readelfFDE
		cieOff  string
		cieOf   = map[*readelfFDE]string{}
	)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := reSection.FindStringSubmatch(line); m != nil {
			section = m[1]
			cieRows[section] = map[string][]readelfRow{}
			continue
		}
		if m := reEntry.FindStringSubmatch(line); m != nil {
			cur, cieOff = nil, ""
			if m[2] == "CIE" {
				cieOff = m[1]
				continue
			}
			start, err1 := strconv.ParseUint(m[4], 16, 64)
			end, err2 := strconv.ParseUint(m[5], 16, 64)
			require.NoError(t, err1)
			require.NoError(t, err2)
			cur = &readelfFDE{section: section, start: start, end: end}
			cieOf[cur] = m[3]
			fdes = append(fdes, cur)
			continue
		}
		if fields := strings.Fields(line); len(fields) > 2 && fields[0] == "LOC" && fields[1] == "CFA" {
			cols = fields[2:]
			continue
		}
		if reRow.MatchString(line) {
			cells := reCell.FindAllString(line, -1)
			pc, err := strconv.ParseUint(cells[0], 16, 64)
			require.NoError(t, err)
			row := readelfRow{pc: pc, cfa: cells[1], regs: map[string]string{}, line: line}
			for i, col := range cols {
				if 2+i < len(cells) {
					row.regs[col] = cells[2+i]
				}
			}
			switch {
			case cur != nil:
				cur.rows = append(cur.rows, row)
			case cieOff != "":
				cieRows[section][cieOff] = append(cieRows[section][cieOff], row)
			}
		}
	}
	require.NoError(t, sc.Err())
	for _, fde := range fdes {
		if len(fde.rows) == 0 {
			if rows := cieRows[fde.section][cieOf[fde]]; len(rows) > 0 {
				row := rows[0]
				row.pc = fde.start
				fde.rows = []readelfRow{row}
			}
		}
	}
	return fdes
}

// overlapsOther reports whether another FDE of the same section covers part
// of fde, or an .eh_frame FDE covers part of a .debug_frame one: then which
// rule applies is a matter of precedence, not of evaluation.
func overlapsOther(fde *readelfFDE, fdes []*readelfFDE) bool {
	for _, o := range fdes {
		if o == fde || o.start >= fde.end || fde.start >= o.end {
			continue
		}
		if o.section == fde.section || o.section == ".eh_frame" {
			return true
		}
	}
	return false
}

// requireKnownExpression checks a row whose CFA readelf shows as an
// expression: in these files, only the linker's PLT entries and glibc's
// signal trampoline have one.
func requireKnownExpression(t *testing.T, got Row, row readelfRow) {
	t.Helper()
	switch got.Kind {
	case KindPLT:
		require.Equal(t, Row{Kind: KindPLT, CFAReg: RegSP, CFAOffset: 8, RAOffset: -8, PLTEdge: got.PLTEdge}, got, row.line)
		require.Contains(t, []uint8{5, 9, 10, 11}, got.PLTEdge, row.line)
	case KindSignal:
		// Offsets in the kernel's ucontext: uc_mcontext.gregs at 40,
		// REG_RBP, REG_RSP, REG_RIP at indexes 10, 15, 16.
		require.Equal(t, Row{Kind: KindSignal, CFAReg: RegSP, CFAOffset: 160, FPOffset: 120, RAOffset: 168}, got, row.line)
	default:
		t.Fatalf("expression row at %#x: got %+v: %s", row.pc, got, row.line)
	}
}

// expected returns the Row (without PC) readelf's row stands for, when its
// CFA is register+N: the stack and frame pointers give KindCFA, others
// KindUnsupported.
func (r readelfRow) expected(regs readelfRegs) (Row, bool) {
	m := reCFA.FindStringSubmatch(r.cfa)
	if m == nil {
		return Row{}, false
	}
	ra := r.regs["ra"]
	if ra == "u" && (!regs.raLink || r.raUndefined) {
		return Row{Kind: KindStop}, true
	}
	off, _ := strconv.ParseInt(m[2], 10, 32)
	row := Row{Kind: KindCFA, CFAReg: RegSP, CFAOffset: int32(off)}
	switch m[1] {
	case regs.sp:
	case regs.fp:
		row.CFAReg = RegFP
	default:
		return Row{Kind: KindUnsupported}, true
	}
	if s := reSlot.FindStringSubmatch(ra); s != nil {
		v, _ := strconv.ParseInt(s[1], 10, 32)
		row.RAOffset = int32(v)
	} else if !regs.raLink || (ra != "" && ra != "u" && ra != "s") {
		return Row{Kind: KindUnsupported}, true
	}
	switch fp := r.regs[regs.fp]; fp {
	case "", "u", "s": // not saved, or same value
	default:
		s := reSlot.FindStringSubmatch(fp)
		if s == nil {
			return Row{Kind: KindUnsupported}, true
		}
		v, _ := strconv.ParseInt(s[1], 10, 32)
		row.FPOffset = int32(v)
	}
	return row, true
}
