package ruby

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// Debian's libruby files are found, with their version, and where the
// VM and the ruby_current_ec TLS slot are.
func TestDetectDebian(t *testing.T) {
	for _, r := range testutil.RubyInterpreters(t) {
		t.Run(r.Name, func(t *testing.T) {
			f, err := elf.Open(r.Lib)
			require.NoError(t, err)
			defer f.Close()
			require.True(t, Runtime.MayHold(f))
			in, err := Detect(f)
			require.NoError(t, err)
			require.Equal(t, r.Version, minorOf(in.Version))
			require.Contains(t, in.Description, "ruby "+in.Version)
			require.NotZero(t, in.ECTLS.Slot)
			require.Equal(t, r.Version == "3.1", in.VMPtr != 0, "ruby_current_vm_ptr is exported by 3.1 alone")
			// The executable links libruby: it holds no VM.
			exe, err := elf.Open(r.Path)
			require.NoError(t, err)
			defer exe.Close()
			_, err = Detect(exe)
			require.ErrorIs(t, err, ErrNotRuby)
		})
	}
}

func TestDetectNotRuby(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	f, err := elf.Open(self)
	require.NoError(t, err)
	defer f.Close()
	_, err = Detect(f)
	require.ErrorIs(t, err, ErrNotRuby)
	in, err := Runtime.Detect(f)
	require.NoError(t, err)
	require.Nil(t, in)
}

// A version without a layout is refused, by name.
func TestLayoutOfUnknown(t *testing.T) {
	for _, v := range []string{"3.1.2", "3.3.8"} {
		_, err := layoutOf(v)
		require.NoError(t, err, v)
	}
	for _, v := range []string{"3.2.2", "3.4.1", "2.7.8", "3", ""} {
		_, err := layoutOf(v)
		require.ErrorIs(t, err, ErrUnsupported, v)
		require.ErrorContains(t, err, `"`+v+`"`)
		require.ErrorContains(t, err, "3.1, 3.3")
	}
}

// succTable builds the succinct table of positions for an iseq of size
// instructions, as iseq.c's succ_index_table_create lays it out.
func succTable(size int, positions []int) []byte {
	immWords := succImmWords
	blocks := 0
	if size < succImmediate {
		immWords = (size + 8) / 9
	} else {
		blocks = (size - succImmediate + 511) / 512
	}
	b := make([]byte, immWords*8+blocks*succBlockSize)
	r := 0
	for j := 0; j < immWords; j++ {
		var w uint64
		for i := 0; i < 9; i++ {
			if r < len(positions) && positions[r] == j*9+i {
				r++
			}
			w |= uint64(r) << (7 * i)
		}
		binary.LittleEndian.PutUint64(b[j*8:], w)
	}
	for k := 0; k < blocks; k++ {
		at := immWords*8 + k*succBlockSize
		binary.LittleEndian.PutUint32(b[at:], uint32(r))
		var small uint64
		rank := 0
		for j := 0; j < 8; j++ {
			if j > 0 {
				small |= uint64(rank) << (9 * (j - 1))
			}
			var bits uint64
			for i := 0; i < 64; i++ {
				if r < len(positions) && positions[r] == k*512+j*64+i+succImmediate {
					bits |= 1 << i
					r++
					rank++
				}
			}
			binary.LittleEndian.PutUint64(b[at+16+j*8:], bits)
		}
		binary.LittleEndian.PutUint64(b[at+8:], small)
	}
	return b
}

// Line agrees with a plain search of the positions (the entry of the last
// position at or before pos), in the immediate part and across blocks.
func TestLineSuccinct(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{2, 9, 53, 54, 55, 600, 566, 5000} {
		positions := []int{0}
		for p := 1; p < size; p++ {
			if rng.IntN(3) == 0 {
				positions = append(positions, p)
			}
		}
		in := &Iseq{FirstLine: 1, Size: size, succ: succTable(size, positions)}
		for i := range positions {
			in.lines = append(in.lines, int32(100+i))
		}
		if len(in.lines) < 2 {
			in.lines = append(in.lines, 999) // a second entry, past the end
		}
		for position := 0; position <= size; position++ {
			pos := max(position-1, 0)
			want := sort.Search(len(positions), func(i int) bool { return positions[i] > pos }) - 1
			require.Equal(t, 100+want, in.Line(uint32(position)), "size %d position %d", size, position)
		}
		require.Equal(t, 1, in.Line(uint32(size+1)), "past the end: the first line")
	}
}

// fakeMem is process memory made of a few regions.
type fakeMem map[uint64][]byte

func (m fakeMem) ReadAt(b []byte, off int64) (int, error) {
	for base, r := range m {
		if uint64(off) >= base && uint64(off)+uint64(len(b)) <= base+uint64(len(r)) {
			return copy(b, r[uint64(off)-base:]), nil
		}
	}
	return 0, errors.New("unmapped")
}

// fakeIseq puts at 0x1000 an iseq of 3.3's layout labelled label, of 4
// instructions on lines 7 (positions 0, 1) and 8 (2, 3), at the given
// instructions' address.
func fakeIseq(m fakeMem, label string, encoded uint64) {
	l := layouts["3.3"]
	iseq := make([]byte, 24)
	binary.LittleEndian.PutUint64(iseq, tImemo|imemoIseq<<imemoShift)
	binary.LittleEndian.PutUint64(iseq[l.IseqBody:], 0x2000)
	m[0x1000] = iseq
	body := make([]byte, bodyHeaderSize)
	binary.LittleEndian.PutUint32(body[l.BodyIseqSize:], 4)
	binary.LittleEndian.PutUint64(body[l.BodyIseqEncoded:], encoded)
	binary.LittleEndian.PutUint64(body[l.BodyPath:], 0x3000)
	binary.LittleEndian.PutUint64(body[l.BodyLabel:], 0x3100)
	binary.LittleEndian.PutUint32(body[l.BodyFirstLine:], 6)
	binary.LittleEndian.PutUint64(body[l.BodyInsnsInfo:], 0x4000)
	binary.LittleEndian.PutUint32(body[l.BodyInsnsInfoSize:], 2)
	binary.LittleEndian.PutUint64(body[l.BodyInsnsSuccTable:], 0x5000)
	m[0x2000] = body
	str := func(s string, heap uint64) []byte {
		b := make([]byte, 64)
		binary.LittleEndian.PutUint64(b, tString)
		binary.LittleEndian.PutUint64(b[l.StringLen:], uint64(len(s)))
		if heap != 0 {
			b[1] |= flNoEmbed >> 8
			binary.LittleEndian.PutUint64(b[l.StringPtr:], heap)
			m[heap] = []byte(s)
		} else {
			copy(b[l.StringEmbed:], s)
		}
		return b
	}
	m[0x3000] = str("/app/work.rb", 0x6000)
	m[0x3100] = str(label, 0)
	info := make([]byte, 24)
	binary.LittleEndian.PutUint32(info, 7)
	binary.LittleEndian.PutUint32(info[12:], 8)
	m[0x4000] = info
	m[0x5000] = succTable(4, []int{0, 2})
}

// A cached iseq names frames until its cookie (body, instructions) says
// another iseq is at its address; then the new one is read.
func TestProcessCookie(t *testing.T) {
	m := fakeMem{}
	fakeIseq(m, "spin", 0x9000)
	in := &Interpreter{Layout: layouts["3.3"]}
	p := in.Process(m, 0)
	now := time.Unix(1000, 0)
	fr, err := p.Read(0x1000, 3, now)
	require.NoError(t, err)
	require.Equal(t, "spin", fr.Function)
	require.Equal(t, "/app/work.rb", fr.File)
	require.EqualValues(t, 8, fr.Line)
	fr, ok := p.Cached(0x1000, 1, now.Add(time.Second))
	require.True(t, ok)
	require.EqualValues(t, 7, fr.Line)

	fakeIseq(m, "work", 0xa000) // freed, and another iseq there
	fr, ok = p.Cached(0x1000, 1, now.Add(time.Second))
	require.True(t, ok, "within recheck the cache answers")
	require.Equal(t, "spin", fr.Function)
	fr, err = p.Read(0x1000, 1, now.Add(2*time.Second))
	require.NoError(t, err)
	require.Equal(t, "work", fr.Function)
	_, ok = p.Cached(0x1000, 1, now.Add(time.Minute))
	require.False(t, ok, "past recheck the cache does not answer")

	m[0x1000][0] = 0 // not an iseq any more
	_, err = p.Read(0x1000, 1, now.Add(time.Minute))
	require.ErrorIs(t, err, ErrNotIseq)
}

// Hostile memory makes errors, never panics or unbounded reads.
func FuzzReadIseq(f *testing.F) {
	m := fakeMem{}
	fakeIseq(m, "spin", 0x9000)
	f.Add(m[0x2000], m[0x3100], uint32(3))
	f.Fuzz(func(t *testing.T, body, label []byte, position uint32) {
		m := fakeMem{}
		fakeIseq(m, "spin", 0x9000)
		m[0x2000] = append(body, make([]byte, max(0, bodyHeaderSize-len(body)))...)
		m[0x3100] = label
		l := layouts["3.3"]
		in, err := l.ReadIseq(m, 0x1000)
		if err == nil {
			_ = in.Line(position)
			require.LessOrEqual(t, len(in.Label), maxStringBytes)
		}
		l31 := layouts["3.1"]
		if in, err := l31.ReadIseq(m, 0x1000); err == nil {
			_ = in.Line(position)
		}
		_, _ = l.Walk(m, 0x2000)
	})
}
