//go:build !linux

package symbolize

import "errors"

func readOwnVDSO() ([]byte, error) { return nil, errors.New("no vDSO to read here") }
