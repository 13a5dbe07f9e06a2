//go:build !linux

package procfs

import (
	"errors"
	"os"
)

var errOpenUnsupported = errors.New("opening files of a process is only supported on Linux")

// OpenInRoot is only supported on Linux.
func (fs FS) OpenInRoot(uint32, string) (*os.File, error) { return nil, errOpenUnsupported }

// OpenMappedFile is only supported on Linux.
func (fs FS) OpenMappedFile(uint32, Map) (*os.File, error) { return nil, errOpenUnsupported }

// CheckLocal is only supported on Linux.
func CheckLocal(*os.File) (*os.File, error) { return nil, errOpenUnsupported }

// CheckOwner is only supported on Linux.
func CheckOwner(*os.File, Status) error { return errOpenUnsupported }

// FDPath is only supported on Linux.
func (fs FS) FDPath(*os.File) string { return "" }
