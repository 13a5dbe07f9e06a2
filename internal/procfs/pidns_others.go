//go:build !linux

package procfs

// PIDNamespace returns the zero value: pid namespaces are a Linux feature.
func (fs FS) PIDNamespace(uint32) (PIDNamespace, error) { return PIDNamespace{}, nil }
