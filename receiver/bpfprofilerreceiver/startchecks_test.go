package bpfprofilerreceiver

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver/internal/metadatatest"
)

// newObservedReceiver returns a receiver on cfg whose kernel sources are
// src, in a profiles pipeline, logging to the returned observer.
func newObservedReceiver(t *testing.T, cfg *Config, src stackSource) (*profilerReceiver, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	set := metadatatest.NewSettings(componenttest.NewTelemetry())
	set.Logger = zap.New(core)
	rcv, err := newProfilerReceiver(cfg, set)
	require.NoError(t, err)
	rcv.kernel.stacks = func(*Config, report.Kind, sourceOptions) (stackSource, error) { return src, nil }
	rcv.setProfilesConsumer(consumertest.NewNop())
	t.Cleanup(func() { require.NoError(t, rcv.Shutdown(context.Background())) })
	return rcv, logs
}

func TestStartCreatesPprofDirectory(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cfg.Pprof.Directory = filepath.Join(t.TempDir(), "a", "b")
	rcv, _ := newObservedReceiver(t, cfg, &fakeSource{})
	require.NoError(t, rcv.Start(context.Background(), componenttest.NewNopHost()))
	entries, err := os.ReadDir(cfg.Pprof.Directory)
	require.NoError(t, err, "created at Start")
	assert.Empty(t, entries, "the write check leaves nothing behind")
}

func TestStartFailsOnUncreatablePprofDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	cfg := createDefaultConfig().(*Config)
	cfg.Pprof.Directory = filepath.Join(file, "profiles") // below a regular file
	src := &fakeSource{}
	rcv, _ := newObservedReceiver(t, cfg, src)
	err := rcv.Start(context.Background(), componenttest.NewNopHost())
	require.ErrorContains(t, err, `pprof::directory: cannot create "`+cfg.Pprof.Directory+`"`)
	assert.ErrorContains(t, err, "not a directory")
}

func TestHostRootWithoutRuntimeStateWarns(t *testing.T) {
	withState := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(withState, "var/lib/docker/containers"), 0o755))
	tests := []struct {
		name, hostRoot string
		warnings       int
	}{
		{"empty host root", t.TempDir(), 1},
		{"missing host root", filepath.Join(t.TempDir(), "host"), 1},
		{"docker's state", withState, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := createDefaultConfig().(*Config)
			cfg.Kubernetes.HostRoot = tt.hostRoot
			rcv, logs := newObservedReceiver(t, cfg, &fakeSource{})
			require.NoError(t, rcv.Start(context.Background(), componenttest.NewNopHost()))
			warned := logs.FilterMessageSnippet("kubernetes::host_root").FilterLevelExact(zapcore.WarnLevel).All()
			require.Len(t, warned, tt.warnings)
			if tt.warnings > 0 {
				assert.Equal(t, tt.hostRoot, warned[0].ContextMap()["kubernetes::host_root"])
				assert.Contains(t, warned[0].ContextMap()["looked_for"],
					filepath.Join(tt.hostRoot, "run/containerd/io.containerd.runtime.v2.task/k8s.io"))
			}
		})
	}
}
