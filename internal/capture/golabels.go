package capture

// GoLabels are the runtime/pprof labels of the goroutine a Go thread ran
// when the sample was taken (bpf/golabels.h).
type GoLabels struct {
	// Data is what BPF stored (each key and value a length and its bytes,
	// or a reference to a literal in the executable; golabels.Decode); nil:
	// evicted before it was read. ID is where BPF keeps it.
	Data []byte
	ID   uint32
}

// GoLabelOutcome says what the read of a Go sample's labels found
// (bpf/common.h, enum thread_ctx_outcome after the OTEP's outcomes).
type GoLabelOutcome uint8

const (
	GoLabelsFound     GoLabelOutcome = iota // the goroutine had labels: they are the sample's
	GoLabelsNone                            // the goroutine had none (or the thread ran none)
	GoLabelsReadFault                       // g, its m, or the labels could not be read
	numGoLabelOutcomes
)

// AllGoLabelOutcomes lists every GoLabelOutcome, in order.
var AllGoLabelOutcomes = []GoLabelOutcome{GoLabelsFound, GoLabelsNone, GoLabelsReadFault}

// Reason is the outcome's telemetry attribute value.
func (o GoLabelOutcome) Reason() string {
	return [...]string{"found", "none", "read_fault"}[o]
}

// GoLabelStats count what the samplers read of Go processes' labels.
type GoLabelStats struct {
	Outcomes [numGoLabelOutcomes]uint64
	// Truncated counts label sets cut to the samplers' bounds; Lost those
	// whose labels could not be read or stored.
	Truncated, Lost uint64
}

// Add returns the sum of s and o.
func (s GoLabelStats) Add(o GoLabelStats) GoLabelStats {
	for i := range s.Outcomes {
		s.Outcomes[i] += o.Outcomes[i]
	}
	s.Truncated += o.Truncated
	s.Lost += o.Lost
	return s
}

// ContextFailures count files and processes whose published context the
// samplers do not read, by source and why.
type ContextFailures struct {
	// ThreadContextUnresolved: processes whose library's TLS descriptor was
	// never bound; ThreadContextFailed: files or processes whose variable
	// could not be located, or whose entry the map refused.
	ThreadContextUnresolved, ThreadContextFailed uint64
	// GoLabelsUnsupported: Go executables of a release or build not read
	// (before go1.21, a later one without DWARF, g not found);
	// GoLabelsFailed: build info unreadable, or an entry the map refused;
	// GoLabelsNoLabels: Go executables that cannot set labels (not read).
	GoLabelsUnsupported, GoLabelsFailed, GoLabelsNoLabels uint64
}

// Add returns the sum of f and o.
func (f ContextFailures) Add(o ContextFailures) ContextFailures {
	return ContextFailures{
		ThreadContextUnresolved: f.ThreadContextUnresolved + o.ThreadContextUnresolved,
		ThreadContextFailed:     f.ThreadContextFailed + o.ThreadContextFailed,
		GoLabelsUnsupported:     f.GoLabelsUnsupported + o.GoLabelsUnsupported,
		GoLabelsFailed:          f.GoLabelsFailed + o.GoLabelsFailed,
		GoLabelsNoLabels:        f.GoLabelsNoLabels + o.GoLabelsNoLabels,
	}
}

// Sub returns f less o (counters since o).
func (f ContextFailures) Sub(o ContextFailures) ContextFailures {
	return ContextFailures{
		ThreadContextUnresolved: f.ThreadContextUnresolved - o.ThreadContextUnresolved,
		ThreadContextFailed:     f.ThreadContextFailed - o.ThreadContextFailed,
		GoLabelsUnsupported:     f.GoLabelsUnsupported - o.GoLabelsUnsupported,
		GoLabelsFailed:          f.GoLabelsFailed - o.GoLabelsFailed,
		GoLabelsNoLabels:        f.GoLabelsNoLabels - o.GoLabelsNoLabels,
	}
}
