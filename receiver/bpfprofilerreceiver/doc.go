//go:generate mdatagen metadata.yaml

// Package bpfprofilerreceiver samples CPU stacks with eBPF and emits them as
// OTLP profiles; see README.md for its configuration.
package bpfprofilerreceiver // import "github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver"
