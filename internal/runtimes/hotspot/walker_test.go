package hotspot

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/bpf"
)

// walkerProc is struct hotspot_proc as bpf2go generated it.
func TestWalkerProcLayout(t *testing.T) {
	require.Equal(t, binary.Size(bpf.CpuHotspotProc{}), binary.Size(walkerProc{}))
	p := walkerProc{HeapsN: 3, InterpSenderSP: -1, InterpMethod: -3, InterpBCP: -8, ConstMethodSize: 56, CodeIsOffset: 1}
	p.Heaps[2] = walkerHeap{Low: 1, High: 2, Segmap: 3, Log2Segment: 7}
	b, err := binary.Append(nil, binary.NativeEndian, &p)
	require.NoError(t, err)
	var got bpf.CpuHotspotProc
	_, err = binary.Decode(b, binary.NativeEndian, &got)
	require.NoError(t, err)
	require.Equal(t, uint32(3), got.HeapsN)
	require.Equal(t, uint64(3), got.Heaps[2].Segmap)
	require.Equal(t, uint32(7), got.Heaps[2].Log2Segment)
	require.Equal(t, []int16{-1, -3, -8}, []int16{got.InterpSenderSp, got.InterpMethod, got.InterpBcp})
	require.Equal(t, uint16(56), got.ConstMethodSize)
	require.Equal(t, uint8(1), got.CodeIsOffset)
}

// A walker entry's code ranges are its heaps' reserved ranges.
func TestCodeRanges(t *testing.T) {
	p := walkerProc{HeapsN: 2}
	p.Heaps[0] = walkerHeap{Low: 0x1000, High: 0x9000}
	p.Heaps[1] = walkerHeap{Low: 0x10000, High: 0x20000}
	b, err := binary.Append(nil, binary.NativeEndian, &p)
	require.NoError(t, err)
	require.Equal(t, [][2]uint64{{0x1000, 0x9000}, {0x10000, 0x20000}}, (&interpreter{}).CodeRanges(b))
	require.Nil(t, codeRanges([]byte{1, 2}), "not an entry")
}
