package memlock

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

func TestExplain(t *testing.T) {
	denied := fmt.Errorf("create map: %w", unix.EPERM)
	other := errors.New("verifier says no")
	for _, tt := range []struct {
		name      string
		old       bool // the kernel charges BPF memory to RLIMIT_MEMLOCK
		raise     error
		err       error
		explained bool
	}{
		{"raised", true, nil, denied, false},
		{"not raised, permission error", true, errors.New("setrlimit: operation not permitted"), denied, true},
		{"not raised, other error", true, errors.New("setrlimit: operation not permitted"), other, false},
		{"new kernel: a missing capability, not memlock", false, errors.New("detect memcg accounting: operation not permitted"), denied, false},
		{"no error", true, errors.New("x"), nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			once, remove = sync.Once{}, func() error { return tt.raise }
			chargesMemlock = func() bool { return tt.old }
			t.Cleanup(func() { once = sync.Once{} })
			got := Explain(tt.err)
			if !errors.Is(got, tt.err) && tt.err != nil {
				t.Errorf("the original error is lost: %v", got)
			}
			if has := got != nil && strings.Contains(got.Error(), "RLIMIT_MEMLOCK"); has != tt.explained {
				t.Errorf("Explain(%v) = %v; explained %v, want %v", tt.err, got, has, tt.explained)
			}
		})
	}
}
