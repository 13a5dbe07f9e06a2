// Package kubernetes holds the manifests that run the collector with the
// bpfprofiler receiver as a DaemonSet; its test checks that they parse and
// keep the settings the receiver depends on.
package kubernetes
