//go:build linux

package probes

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// Every 4th callback blocks the event loop for 200 ms, the others for 15 ms;
// callbacks are 20 ms apart so each runs in its own callback scope.
const nodeScript = `
const busy = (ms) => { const end = performance.now() + ms; while (performance.now() < end) {} };
const total = 16, long = 200, short = 15;
let n = 0;
function tick() {
  busy(n % 4 === 3 ? long : short);
  if (++n < total) setTimeout(tick, 20);
  else setImmediate(() => console.log("done"));
}
setTimeout(tick, 800); // the probes attach after the exec event: leave them time
`

const nodeLongBlocks = 4

// The real case: node's InternalCallbackScope constructor/destructor pair,
// given as demangled names, reports the long event loop blocks only.
func TestNodeCallbackScope(t *testing.T) {
	testutil.RequireBPF(t)
	const node = "/usr/bin/node"
	if _, err := os.Stat(node); err != nil {
		testutil.SkipOrFail(t, "no %s: %v", node, err)
	}
	script := filepath.Join(t.TempDir(), "blocks.js")
	require.NoError(t, os.WriteFile(script, []byte(nodeScript), 0o644))

	_, c := openAndRun(t, []Spec{{
		ID:             "node.callback_scope",
		FileMatch:      "/node$",
		EntrySymbol:    "node::InternalCallbackScope::InternalCallbackScope(...)",
		ExitSymbol:     "node::InternalCallbackScope::~InternalCallbackScope()",
		MainThreadOnly: true,
		MinDuration:    100 * time.Millisecond,
	}})
	child := testutil.StartWorkloadChild(t, node, script)
	cmd := child.Cmd
	require.NoError(t, child.Wait(t, testutil.Patient(30*time.Second)), "node script")
	// Records reach Run within the reader's poll interval; on a busy
	// machine give them time.
	var recs []capture.RawScope
	collect := func() bool {
		recs = recs[:0]
		for _, r := range c.byProbe(0) {
			if r.PID == uint32(cmd.Process.Pid) {
				recs = append(recs, r)
			}
		}
		return len(recs) >= nodeLongBlocks
	}
	deadline := time.Now().Add(3 * time.Second)
	for !collect() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	for i, r := range recs {
		t.Logf("record %d: tid %d comm %q duration %v", i, r.TID, r.Comm, r.Duration())
	}
	require.InDelta(t, nodeLongBlocks, len(recs), 1, "records: %+v", recs)
	for _, r := range recs {
		require.True(t, r.MainThread())
		require.Equal(t, "node", r.Comm)
		require.GreaterOrEqual(t, r.Duration(), 200*time.Millisecond, strconv.Itoa(int(r.Duration())))
		require.LessOrEqual(t, r.Duration(), 230*time.Millisecond)
	}
}
