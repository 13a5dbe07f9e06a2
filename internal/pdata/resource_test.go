package pdata

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// Resource attributes asked on the samples are there too, one attribute
// table entry per value whatever the number of samples; the resource keeps
// them, and processes without them (the host's, no k8s.*) get only theirs.
func TestBuilderResourceOnSamples(t *testing.T) {
	pod := map[string]any{
		attrkey.HostName: "node-1", attrkey.ContainerID: "c0ffee", attrkey.K8sPodName: "checkout-7f9",
		attrkey.K8sNamespaceName: "payments", attrkey.K8sContainerName: "app", attrkey.ServiceName: "app",
	}
	host := map[string]any{attrkey.HostName: "node-1"}
	on := []string{attrkey.K8sNamespaceName, attrkey.K8sPodName, attrkey.K8sContainerName, attrkey.ContainerID, attrkey.HostName}
	reports := cpu(
		process(1, pod,
			report.Sample{TID: 1, Frames: hotStack(), Value: 3},
			report.Sample{TID: 2, Frames: coldStack(), Value: 1}),
		process(2, host, report.Sample{TID: 2, Frames: coldStack(), Value: 1}))
	for _, tt := range []struct {
		name string
		keys []string
		want [][]string // per resource, in order: the resource keys on its samples
	}{
		{"off", nil, [][]string{{}, {}}},
		{"pod and host", on, [][]string{
			{attrkey.ContainerID, attrkey.HostName, attrkey.K8sContainerName, attrkey.K8sNamespaceName, attrkey.K8sPodName},
			{attrkey.HostName}}},
		{"one key", []string{attrkey.K8sPodName}, [][]string{{attrkey.K8sPodName}, {}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Builder{Threads: AllThreadAttributes, ResourceOnSamples: tt.keys}.Build(reports)
			require.NoError(t, err)
			res := decode(t, p)
			require.Len(t, res, 2)
			for i, r := range res {
				for _, s := range r.Profiles[0].Samples {
					var got []string
					for k, v := range s.Process {
						if rv, ok := r.Attributes[k]; ok && k != attrkey.ServiceName {
							assert.Equal(t, rv, v, "%s on the sample is the resource's", k)
							got = append(got, k)
						}
					}
					slices.Sort(got)
					assert.Equal(t, tt.want[i], append([]string{}, got...), "resource %v", r.Attributes)
				}
				if i == 0 {
					assert.Equal(t, "checkout-7f9", r.Attributes[attrkey.K8sPodName], "the resource keeps its attributes")
				}
			}
			// One table entry per value: the pod's name once for its two samples.
			n := 0
			dict := p.Dictionary()
			for _, a := range dict.AttributeTable().All() {
				if dict.StringTable().At(int(a.KeyStrindex())) == attrkey.K8sPodName {
					n++
				}
			}
			assert.Equal(t, countKey(tt.keys, attrkey.K8sPodName), n)
		})
	}
}

func countKey(keys []string, k string) int {
	if slices.Contains(keys, k) {
		return 1
	}
	return 0
}

// podReport is a report of a node's pods: containers processes, each with
// samples samples of distinct threads over two stacks.
func podReport(containers, samples int) report.Profile {
	var procs []report.Process
	for c := range containers {
		attrs := map[string]any{
			attrkey.HostName: "node-1", attrkey.ContainerID: fmt.Sprintf("%064x", c), attrkey.ContainerRuntimeName: "containerd",
			attrkey.K8sPodUID: fmt.Sprintf("0b5c1a7e-3f2d-4c8e-9a61-%012x", c), attrkey.K8sPodName: fmt.Sprintf("checkout-7f9-%d", c),
			attrkey.K8sNamespaceName: "payments", attrkey.K8sContainerName: "app", attrkey.ServiceName: "app",
		}
		var ss []report.Sample
		for i := range samples {
			st := hotStack()
			if i%4 == 0 {
				st = coldStack()
			}
			ss = append(ss, report.Sample{TID: uint32(1000*c + i%16), ThreadName: "worker", Frames: st, Value: 1})
		}
		procs = append(procs, process(uint32(100+c), attrs, ss...))
	}
	return cpu(procs...)
}

// The cost of resource_attributes_on_samples (the ConfigMap's five keys) on
// building a report and on its size: the wire-bytes metrics are the
// request's protobuf and gzip sizes per sample.
func BenchmarkBuildResourceOnSamples(b *testing.B) {
	rep := podReport(20, 500)
	keys := []string{attrkey.K8sNamespaceName, attrkey.K8sPodName, attrkey.K8sContainerName, attrkey.ContainerID, attrkey.HostName}
	for _, bc := range []struct {
		name string
		keys []string
	}{{"bare", nil}, {"labels", keys}} {
		b.Run(bc.name, func(b *testing.B) {
			builder := Builder{Threads: AllThreadAttributes, ResourceOnSamples: bc.keys}
			var p pprofile.Profiles
			for b.Loop() {
				var err error
				if p, err = builder.Build(rep); err != nil {
					b.Fatal(err)
				}
			}
			raw, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(p)
			if err != nil {
				b.Fatal(err)
			}
			var z bytes.Buffer
			w := gzip.NewWriter(&z)
			_, _ = w.Write(raw)
			_ = w.Close()
			n := float64(p.SampleCount())
			b.ReportMetric(float64(len(raw))/n, "proto-B/sample")
			b.ReportMetric(float64(z.Len())/n, "gzip-B/sample")
		})
	}
}
