//go:build linux

package unwinder

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/bpfprofiler/bpfprofiler/internal/golabels"
	"github.com/bpfprofiler/bpfprofiler/internal/threadctx"
)

// TestContextEntry checks context_procs' entry: a bit and the fields of
// each source a process has, nothing of one it has not.
func TestContextEntry(t *testing.T) {
	loc := &threadctx.Location{Offset: -0x40, Module: 2}
	bin := &golabels.Binary{TLSOffset: -8, StringsLo: 0x400000, StringsHi: 0x500000,
		Offsets: golabels.Offsets{GM: 48, GLabels: 352, GGoid: 152, MG0: 0, MGsignal: 72, MCurg: 184, Layout: golabels.LabelSlice}}
	arm := *bin
	arm.GRegister = true
	tests := []struct {
		name       string
		loc        *threadctx.Location
		bin        *golabels.Binary
		bias       uint64
		sources    uint32
		gRegister  uint8
		wantOffset int64
		strings    [2]uint64
	}{
		{name: "nothing", sources: 0},
		{name: "thread context", loc: loc, sources: contextOTEP, wantOffset: -0x40},
		{name: "go labels", bin: bin, sources: contextGo, strings: [2]uint64{0x400000, 0x500000}},
		{name: "go labels, position independent", bin: bin, bias: 0x5600_0000_0000, sources: contextGo,
			strings: [2]uint64{0x5600_0040_0000, 0x5600_0050_0000}},
		{name: "go labels, bias unknown", bin: bin, bias: unknownBias, sources: contextGo},
		{name: "go labels, g in x28 only", bin: &arm, sources: contextGo, gRegister: 1, strings: [2]uint64{0x400000, 0x500000}},
		{name: "both", loc: loc, bin: bin, sources: contextOTEP | contextGo, wantOffset: -0x40, strings: [2]uint64{0x400000, 0x500000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := ContextEntry(tt.loc, tt.bin, tt.bias)
			if e.Sources != tt.sources || e.Otep.Offset != tt.wantOffset || e.Go.G_register != tt.gRegister {
				t.Fatalf("sources %d, offset %d, g register %d; want %d, %d, %d", e.Sources, e.Otep.Offset,
					e.Go.G_register, tt.sources, tt.wantOffset, tt.gRegister)
			}
			if tt.loc != nil && e.Otep.Module != 2 {
				t.Errorf("module %d, want 2", e.Otep.Module)
			}
			if tt.bin == nil {
				if e.Go.G_labels != 0 || e.Go.StringsHi != 0 {
					t.Errorf("go fields %+v without a Go executable", e.Go)
				}
				return
			}
			g := e.Go
			if g.TlsOffset != -8 || g.G_m != 48 || g.G_labels != 352 || g.G_goid != 152 || g.M_gsignal != 72 ||
				g.M_curg != 184 || g.Layout != uint8(golabels.LabelSlice) || [2]uint64{g.StringsLo, g.StringsHi} != tt.strings {
				t.Errorf("go fields %+v", g)
			}
		})
	}
}

// TestContextPIDWords sizes context_pids from pid_max: a bit a pid, within
// the object's words, all of them when the file says nothing.
func TestContextPIDWords(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, content string
		want          uint32
	}{
		{"default 32768", "32768\n", 512},
		{"a partial word", "32769\n", 513},
		{"systemd's 4194304", "4194304\n", 65536},
		{"past the limit", "8388608\n", 65536},
		{"zero", "0\n", 65536},
		{"not a number", "many\n", 65536},
		{"no file", "", 65536},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(dir, "absent")
			if tt.content != "" {
				file = filepath.Join(dir, tt.name)
				if err := os.WriteFile(file, []byte(tt.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := contextPIDWords(file, 65536); got != tt.want {
				t.Errorf("%d words, want %d", got, tt.want)
			}
		})
	}
}
