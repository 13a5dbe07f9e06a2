package bpfprofilerreceiver // import "github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver"

import (
	"context"
	"sync"

	"go.opentelemetry.io/collector/component"
)

// sharedComponents maps a configuration to the one receiver instance that
// serves all of its pipelines. Start runs once, on the first call; Shutdown
// runs once, on the first call, and removes the entry.
type sharedComponents struct {
	mu    sync.Mutex
	comps map[component.Config]*sharedComponent
}

func newSharedComponents() *sharedComponents {
	return &sharedComponents{comps: map[component.Config]*sharedComponent{}}
}

func (s *sharedComponents) getOrAdd(key component.Config, create func() (*profilerReceiver, error)) (*sharedComponent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.comps[key]; ok {
		return c, nil
	}
	r, err := create()
	if err != nil {
		return nil, err
	}
	c := &sharedComponent{receiver: r}
	c.removeFunc = func() {
		s.mu.Lock()
		delete(s.comps, key)
		s.mu.Unlock()
	}
	s.comps[key] = c
	return c, nil
}

type sharedComponent struct {
	receiver     *profilerReceiver
	startOnce    sync.Once
	shutdownOnce sync.Once
	startErr     error
	shutdownErr  error
	removeFunc   func()
}

func (c *sharedComponent) unwrap() *profilerReceiver { return c.receiver }

func (c *sharedComponent) Start(ctx context.Context, host component.Host) error {
	c.startOnce.Do(func() { c.startErr = c.receiver.Start(ctx, host) })
	return c.startErr
}

func (c *sharedComponent) Shutdown(ctx context.Context) error {
	c.shutdownOnce.Do(func() {
		c.shutdownErr = c.receiver.Shutdown(ctx)
		c.removeFunc()
	})
	return c.shutdownErr
}
