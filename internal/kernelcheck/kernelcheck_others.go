//go:build !linux

package kernelcheck

import "errors"

// Check returns an error: the receiver's programs run on Linux only.
func Check() error { return errors.New("BPF programs need Linux") }
