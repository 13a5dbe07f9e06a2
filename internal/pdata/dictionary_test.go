package pdata

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// An address of a mapped file is one location however many samples show
// it; the same address with inlined frames, or in another mapping, or JIT
// code at it, is another.
func TestLocationsOfFileAddresses(t *testing.T) {
	libc := &report.Mapping{Start: 0x1000, Limit: 0x9000, File: "/usr/lib/libc.so.6"}
	other := &report.Mapping{Start: 0x1000, Limit: 0x9000, File: "/usr/lib/libz.so.1"}
	anon := &report.Mapping{Start: 0x1000, Limit: 0x9000}
	native := func(m *report.Mapping, fn string) report.Frame {
		return report.Frame{Address: 0x1234, Function: fn, Type: report.FrameNative, Mapping: m}
	}
	inlined := native(libc, "inner")
	inlined.Inlined = true
	b := newDictionaryBuilder(pprofile.NewProfilesDictionary())
	before := b.dict.LocationTable().Len() // the empty location at 0
	for _, tt := range []struct {
		name   string
		frames []report.Frame
		same   bool // as the first
	}{
		{"first", []report.Frame{native(libc, "memcpy")}, true},
		{"again", []report.Frame{native(libc, "memcpy")}, true},
		{"with an inlined frame", []report.Frame{inlined, native(libc, "memcpy")}, false},
		{"another file", []report.Frame{native(other, "deflate")}, false},
		{"JIT code", []report.Frame{{Address: 0x1234, Function: "Burn.spin", Type: report.FrameJVM, Mapping: anon}}, false},
	} {
		first, err := b.location([]report.Frame{native(libc, "memcpy")})
		require.NoError(t, err)
		i, err := b.location(tt.frames)
		require.NoError(t, err, tt.name)
		assert.Equal(t, tt.same, i == first, tt.name)
	}
	assert.Equal(t, before+4, b.dict.LocationTable().Len())
}
