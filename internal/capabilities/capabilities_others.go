//go:build !linux

package capabilities

import "errors"

// Effective returns an error: capabilities are a Linux feature.
func Effective() (Set, error) {
	return 0, errors.New("capabilities are only supported on Linux")
}
