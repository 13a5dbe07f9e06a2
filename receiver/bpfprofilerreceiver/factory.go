package bpfprofilerreceiver // import "github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver"

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/xreceiver"

	"github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver/internal/metadata"
)

// NewFactory creates the factory of the bpfprofiler receiver.
func NewFactory() receiver.Factory {
	return xreceiver.NewFactory(
		metadata.Type,
		createDefaultConfig,
		xreceiver.WithProfiles(createProfiles, metadata.ProfilesStability),
		xreceiver.WithLogs(createLogs, metadata.LogsStability),
	)
}

// receivers holds one instance per configuration so that the profiles and
// logs pipelines of the same receiver share the kernel programs.
var receivers = newSharedComponents()

func createProfiles(_ context.Context, set receiver.Settings, cfg component.Config, next xconsumer.Profiles) (xreceiver.Profiles, error) {
	shared, err := receivers.getOrAdd(cfg, func() (*profilerReceiver, error) {
		return newProfilerReceiver(cfg.(*Config), set)
	})
	if err != nil {
		return nil, err
	}
	shared.unwrap().setProfilesConsumer(next)
	return shared, nil
}

func createLogs(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Logs) (receiver.Logs, error) {
	shared, err := receivers.getOrAdd(cfg, func() (*profilerReceiver, error) {
		return newProfilerReceiver(cfg.(*Config), set)
	})
	if err != nil {
		return nil, err
	}
	shared.unwrap().setLogsConsumer(next)
	return shared, nil
}
