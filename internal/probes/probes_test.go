package probes

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
)

const (
	ctorC1     = "_ZN4node21InternalCallbackScopeC1EPNS_11EnvironmentEN2v85LocalINS3_6ObjectEEERKNS_13async_contextEi"
	ctorC2     = "_ZN4node21InternalCallbackScopeC2EPNS_11EnvironmentEN2v85LocalINS3_6ObjectEEERKNS_13async_contextEi"
	ctorWrap   = "_ZN4node21InternalCallbackScopeC1EPNS_9AsyncWrapEi"
	dtorD1     = "_ZN4node21InternalCallbackScopeD1Ev"
	dtorD2     = "_ZN4node21InternalCallbackScopeD2Ev"
	closeFn    = "_ZN4node21InternalCallbackScope5CloseEv"
	ctorDemang = "node::InternalCallbackScope::InternalCallbackScope(node::Environment*, v8::Local<v8::Object>, node::async_context const&, int)"
)

func TestMatchSymbol(t *testing.T) {
	all := []string{ctorC1, ctorC2, ctorWrap, dtorD1, dtorD2, closeFn, "timed_scope", "main.handle", ctorC1 + ".cold"}
	tests := []struct {
		query string
		want  []string
	}{
		{ctorC1, []string{ctorC1}}, // mangled: exact only
		{ctorDemang, []string{ctorC1, ctorC2}},
		{"node::InternalCallbackScope::InternalCallbackScope(node::Environment *,v8::Local<v8::Object>,node::async_context const &,int)", []string{ctorC1, ctorC2}},
		{"node::InternalCallbackScope::InternalCallbackScope", []string{ctorC1, ctorC2, ctorWrap}},
		{"node::InternalCallbackScope::InternalCallbackScope(...)", []string{ctorC1, ctorC2, ctorWrap}},
		{"node::InternalCallbackScope::~InternalCallbackScope()", []string{dtorD1, dtorD2}},
		{"node::InternalCallbackScope::Close()", []string{closeFn}},
		{"node::InternalCallbackScope::Close(int)", nil},
		{"timed_scope", []string{"timed_scope"}},
		{"main.handle", []string{"main.handle"}},
		{"InternalCallbackScope", nil}, // not qualified
	}
	for _, tc := range tests {
		var got []string
		for _, name := range all {
			if MatchSymbol(tc.query, name) {
				got = append(got, name)
			}
		}
		require.Equal(t, tc.want, got, tc.query)
	}
}

func TestLongestIdentifier(t *testing.T) {
	require.Equal(t, "InternalCallbackScope", longestIdentifier("node::InternalCallbackScope::~InternalCallbackScope"))
	require.Equal(t, "push_back", longestIdentifier("std::vector<unsigned int>::push_back"))
	require.Equal(t, "f", longestIdentifier("operator f"))
}

func encodeRecord(start, end uint64, pid, tid, idx uint32, comm string) []byte {
	rec := bpf.ProbeProbeRecord{StartNs: start, EndNs: end, Pid: pid, Tid: tid, ProbeIndex: idx}
	for i := range min(len(comm), len(rec.Comm)) {
		rec.Comm[i] = int8(comm[i])
	}
	b, err := binary.Append(nil, binary.LittleEndian, &rec)
	if err != nil {
		panic(err)
	}
	return b
}

func TestDecodeRecord(t *testing.T) {
	r, _, err := decodeRecord(encodeRecord(1000, 251000, 42, 43, 2, "node"))
	require.NoError(t, err)
	require.Equal(t, capture.RawScope{ProbeIndex: 2, PID: 42, TID: 43, Comm: "node", Start: 1000, End: 251000}, r)
	require.Equal(t, 250*time.Microsecond, r.Duration())
	require.False(t, r.MainThread())

	r, _, err = decodeRecord(encodeRecord(1, 2, 7, 7, 0, "0123456789abcdef")) // comm without NUL
	require.NoError(t, err)
	require.Equal(t, "0123456789abcdef", r.Comm)
	require.True(t, r.MainThread())

	_, _, err = decodeRecord(make([]byte, recordSize-1))
	require.Error(t, err)

	// Entry stacks: frames after the record, or why there are none.
	srec := bpf.ProbeProbeStackRecord{Rec: bpf.ProbeProbeRecord{StartNs: 5, EndNs: 9, Pid: 3, Tid: 3, StackFrames: 3}}
	srec.Frames[0], srec.Frames[1], srec.Frames[2], srec.Frames[3] = 0x401000, 0x402000, 0x403000, 0x404000
	b, err := binary.Append(nil, binary.LittleEndian, &srec)
	require.NoError(t, err)
	r, _, err = decodeRecord(b)
	require.NoError(t, err)
	require.Equal(t, []uint64{0x401000, 0x402000, 0x403000}, r.EntryStack)
	require.Equal(t, capture.StackKept, r.EntryStackLoss)
	_, _, err = decodeRecord(b[:recordSize+8]) // cut
	require.Error(t, err)
	for errno, want := range map[int32]capture.StackLoss{-2: capture.StackMissing, -14: capture.StackCaptureFailed} {
		srec.Rec.StackFrames = errno
		b, err := binary.Append(nil, binary.LittleEndian, &srec)
		require.NoError(t, err)
		r, _, err = decodeRecord(b)
		require.NoError(t, err)
		require.Nil(t, r.EntryStack)
		require.Equal(t, want, r.EntryStackLoss)
	}
	srec.Rec.StackFrames = 1000 // more than fit: cut to the record
	b, err = binary.Append(nil, binary.LittleEndian, &srec)
	require.NoError(t, err)
	r, _, err = decodeRecord(b)
	require.NoError(t, err)
	require.Len(t, r.EntryStack, len(srec.Frames))

	// Goroutine labels after the record, or after its entry stack.
	labels := []byte("\x07handler\x08checkout\x01k\x02\xff\xfe")
	rec := bpf.ProbeProbeRecord{StartNs: 1, EndNs: 2, LabelsSize: uint32(len(labels))}
	b, err = binary.Append(nil, binary.LittleEndian, &rec)
	require.NoError(t, err)
	r, undecodable, err := decodeRecord(append(b, labels...))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"handler": "checkout"}, r.GoLabels)
	require.Equal(t, 1, undecodable, "the label whose value is not UTF-8")
	_, _, err = decodeRecord(append(b, labels[:5]...)) // cut
	require.Error(t, err)
	srec.Rec.StackFrames, srec.Rec.LabelsSize = -2, uint32(len(labels))
	b, err = binary.Append(nil, binary.LittleEndian, &srec)
	require.NoError(t, err)
	r, _, err = decodeRecord(append(b, labels...))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"handler": "checkout"}, r.GoLabels)
	require.Equal(t, capture.StackMissing, r.EntryStackLoss)

	// USDT arguments after the record, or after its entry stack.
	var args bpf.ProbeProbeArgs
	args.Values = [4]uint64{42, uint64(1<<64 - 30), 6, 0}
	args.Failed = 1 << 3
	copy(args.Strs[2][:], "hi\xff\x00junk")
	wantArgs := []capture.ProbeArg{{Int: 42}, {Int: -30}, {Int: 6, Str: "hi\uFFFD"}, {Failed: true}}
	rec = bpf.ProbeProbeRecord{StartNs: 1, EndNs: 2, Args: 1}
	b, err = binary.Append(nil, binary.LittleEndian, &rec)
	require.NoError(t, err)
	b, err = binary.Append(b, binary.LittleEndian, &args)
	require.NoError(t, err)
	r, _, err = decodeRecord(b)
	require.NoError(t, err)
	require.Equal(t, wantArgs, r.Args)
	_, _, err = decodeRecord(b[:len(b)-1]) // cut
	require.Error(t, err)
	srec.Rec.StackFrames, srec.Rec.LabelsSize, srec.Rec.Args = 2, 0, 1
	b, err = binary.Append(nil, binary.LittleEndian, &srec)
	require.NoError(t, err)
	b, err = binary.Append(b, binary.LittleEndian, &args)
	require.NoError(t, err)
	r, _, err = decodeRecord(b)
	require.NoError(t, err)
	require.Equal(t, wantArgs, r.Args)
	require.Equal(t, []uint64{0x401000, 0x402000}, r.EntryStack)

	pid, err := decodeExec([]byte{1, 2, 0, 0})
	require.NoError(t, err)
	require.Equal(t, uint32(0x201), pid)
	_, err = decodeExec([]byte{1})
	require.Error(t, err)
}

// fakeRing replays samples, then reports an interruption, like a flushed
// BPF ring buffer.
type fakeRing struct {
	samples [][]byte
	fail    error
}

func (f *fakeRing) Read() ([]byte, error) {
	if len(f.samples) == 0 {
		if f.fail != nil {
			return nil, f.fail
		}
		return nil, errInterrupted
	}
	b := f.samples[0]
	f.samples = f.samples[1:]
	return b, nil
}

func (f *fakeRing) Pending() bool { return len(f.samples) > 0 }

func TestReadRecords(t *testing.T) {
	ring := &fakeRing{samples: [][]byte{
		encodeRecord(1, 2, 10, 10, 0, "a"),
		encodeRecord(3, 4, 10, 11, 1, "b"),
		{1, 2, 3},                          // short
		encodeRecord(5, 6, 10, 10, 9, "c"), // no such probe
		encodeRecord(7, 8, 10, 10, 1, "d"),
	}}
	var batches [][]capture.RawScope
	var delivered, malformed uint64
	err := readRecords(ring, 2, func() bool { return true }, func(rs []capture.RawScope) {
		batches = append(batches, append([]capture.RawScope(nil), rs...))
	}, counters{
		delivered: func(n uint64) { delivered += n },
		malformed: func(n uint64) { malformed += n },
	})
	require.NoError(t, err)
	require.Len(t, batches, 1, "one batch while the ring had data")
	require.Len(t, batches[0], 3)
	require.Equal(t, "d", batches[0][2].Comm)
	require.Equal(t, uint64(3), delivered)
	require.Equal(t, uint64(2), malformed)

	// An interruption without stop goes on reading; other errors end Run.
	boom := errors.New("boom")
	calls := 0
	err = readRecords(&fakeRing{fail: boom}, 1, func() bool { calls++; return false }, func([]capture.RawScope) {}, counters{
		delivered: func(uint64) {}, malformed: func(uint64) {},
	})
	require.ErrorIs(t, err, boom)
	require.Zero(t, calls)
}

func TestValidateSpecs(t *testing.T) {
	ok := Spec{ID: "a", FileMatch: "/node$", EntrySymbol: "f", ExitSymbol: "g"}
	require.NoError(t, ValidateSpecs([]Spec{ok, {ID: "b", FileMatch: "x", EntrySymbol: "f", Return: true}}))

	err := ValidateSpecs([]Spec{
		ok,
		{ID: "a", FileMatch: "(", EntrySymbol: "f"},
		{FileMatch: "x"},
		{ID: "c", FileMatch: "x", EntrySymbol: "f", ExitSymbol: "f", MinDuration: -time.Second},
		{ID: "d", FileMatch: "x", EntrySymbol: "f", ExitSymbol: "g", Return: true, MaxPerSecond: MaxMaxPerSecond + 1},
	})
	require.Error(t, err)
	type problem struct {
		index int
		field string
		msg   string
	}
	var got []problem
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *FieldError
		require.ErrorAs(t, e, &fe)
		got = append(got, problem{fe.Index, fe.Field, fe.Err.Error()})
	}
	require.ElementsMatch(t, []problem{
		{1, "ID", `"a" already used by probe 0`},
		{1, "FileMatch", "invalid regexp: error parsing regexp: missing closing ): `(`"},
		{1, "ExitSymbol", "must not be empty: the scope needs an exit symbol too"},
		{2, "ID", "must not be empty"},
		{2, "", ErrNoScope.Error()},
		{3, "ExitSymbol", "must differ from the entry symbol (a function's entry and return is a probe of one symbol)"},
		{3, "MinDuration", "must not be negative"},
		{4, "ExitSymbol", "must be empty: the scope ends when the function returns"},
		{4, "MaxPerSecond", "must be 0 (unlimited) to 1000000, got 1000001"},
	}, got)

	require.ErrorContains(t, ValidateSpecs(make([]Spec, MaxProbes+1)), "at most 64 probes")
}

// A USDT scope names both probes as provider:name, and no symbol.
func TestValidateUSDTSpecs(t *testing.T) {
	tests := []struct {
		name, entry, exit string
		symbol            string
		field, err        string // "": valid
	}{
		{name: "pair", entry: "postgresql:query__start", exit: "postgresql:query__done"},
		{name: "no exit", entry: "a:b", field: "ExitUSDT", err: "must not be empty: the scope needs an exit probe too"},
		{name: "no entry", exit: "a:b", field: "EntryUSDT", err: "must not be empty: the scope needs an entry probe too"},
		{name: "no provider", entry: ":b", exit: "a:c", field: "EntryUSDT", err: `want provider:name, got ":b"`},
		{name: "no name", entry: "a:b", exit: "a:", field: "ExitUSDT", err: `want provider:name, got "a:"`},
		{name: "no colon", entry: "ab", exit: "a:c", field: "EntryUSDT", err: `want provider:name, got "ab"`},
		{name: "two colons", entry: "a:b:c", exit: "a:c", field: "EntryUSDT", err: `want provider:name, got "a:b:c"`},
		{name: "space", entry: "a:b", exit: "a: c", field: "ExitUSDT", err: `"a: c": a provider or name has no spaces`},
		{name: "same", entry: "a:b", exit: "a:b", field: "ExitUSDT", err: "must differ from the entry probe"},
		{name: "with symbol", entry: "a:b", exit: "a:c", symbol: "f", err: ErrMixedScope.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Spec{ID: "p", FileMatch: "x", EntryUSDT: tt.entry, ExitUSDT: tt.exit, EntrySymbol: tt.symbol, Return: tt.symbol != ""}
			err := ValidateSpecs([]Spec{s})
			if tt.err == "" {
				require.NoError(t, err)
				return
			}
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, FieldError{Index: 0, Field: tt.field}, FieldError{Index: fe.Index, Field: fe.Field})
			require.EqualError(t, fe.Err, tt.err)
		})
	}
}

func TestRateLimitParameters(t *testing.T) {
	tests := []struct {
		perSecond               uint64
		wantInterval, wantBurst uint64
	}{
		{perSecond: 0},                                              // unlimited
		{perSecond: 1, wantInterval: 1e9},                           // bursts of one record
		{perSecond: 10, wantInterval: 1e8},                          // a tenth is one record
		{perSecond: 500, wantInterval: 2e6, wantBurst: 49 * 2e6},    // bursts of 50
		{perSecond: 10000, wantInterval: 1e5, wantBurst: 999 * 1e5}, // bursts of 1000
		{perSecond: MaxMaxPerSecond, wantInterval: 1000, wantBurst: 99999 * 1000},
	}
	for _, tt := range tests {
		interval, burst := rateLimit(tt.perSecond)
		require.Equal(t, tt.wantInterval, interval, "interval of %d/s", tt.perSecond)
		require.Equal(t, tt.wantBurst, burst, "burst of %d/s", tt.perSecond)
	}
}

func TestStatsDropped(t *testing.T) {
	st := Stats{Drops: []ProbeDrops{{RateLimited: 5, RingBufferFull: 1}, {}, {RateLimited: 2}}}
	require.Equal(t, ProbeDrops{RateLimited: 7, RingBufferFull: 1}, st.Dropped())
}

// Whatever the ring buffer hands over, decoding never panics and never
// returns more frames than a record holds.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeRecord(1000, 251000, 42, 43, 2, "node"))
	srec := bpf.ProbeProbeStackRecord{Rec: bpf.ProbeProbeRecord{StartNs: 5, EndNs: 9, StackFrames: 2}}
	srec.Frames[0], srec.Frames[1] = 0x401000, 0x402000
	b, err := binary.Append(nil, binary.LittleEndian, &srec)
	require.NoError(f, err)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, _, err := decodeRecord(b)
		if err != nil {
			return
		}
		if len(r.EntryStack) > len(srec.Frames) {
			t.Fatalf("%d entry stack frames from %d bytes", len(r.EntryStack), len(b))
		}
		if len(r.EntryStack) > 0 && r.EntryStackLoss != capture.StackKept {
			t.Fatalf("frames and a loss: %+v", r)
		}
	})
}

// A probe's attributes take the slots of its records' arguments in the
// order of their names; each is an integer (argN) or a string (str(argN)).
func TestArgAttributes(t *testing.T) {
	s := Spec{ID: "q", FileMatch: "x", EntryUSDT: "p:a", ExitUSDT: "p:b",
		Attributes: map[string]string{"rows": "arg11", "db.query.text": "str(arg0)", "n": "arg3"}}
	require.NoError(t, ValidateSpecs([]Spec{s}))
	require.Equal(t, []Attribute{{Name: "db.query.text", Arg: 0, String: true}, {Name: "n", Arg: 3}, {Name: "rows", Arg: 11}}, s.ArgAttributes())
	require.Nil(t, Spec{}.ArgAttributes())

	s.Attributes["bad"] = "arg"
	var fe *FieldError
	require.ErrorAs(t, ValidateSpecs([]Spec{s}), &fe)
	require.Equal(t, "Attributes::bad", fe.Field)
}
