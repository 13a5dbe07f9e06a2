package procfs

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Reasons a file a process controls is refused, as RefusedError.Reason
// and in counters.
const (
	ReasonNotRegular = "not_regular" // a FIFO, device, socket or directory
	ReasonSymlink    = "symlink"     // the last component is a symbolic link (or a magic link on the way)
	ReasonOwner      = "owner"       // owned by neither the process's uid nor root
	ReasonRemoteFS   = "remote_fs"   // on FUSE or a network file system: reads or page faults may block forever
	ReasonReplaced   = "replaced"    // not the file the process has mapped (device and inode differ)
	ReasonTooLarge   = "too_large"   // larger than the configured bound
	ReasonTimeout    = "timeout"     // opening or reading did not finish in time
	ReasonStuck      = "stuck"       // an earlier open or read of the file never returned
	ReasonBusy       = "busy"        // a concurrent open or read of the file is under way
)

// RefusedError says why a file a process controls was not read.
type RefusedError struct {
	Path   string // as the collector names it, e.g. /proc/42/root/tmp/perf-42.map
	Reason string // one of the Reason constants
	Detail string
}

func (e *RefusedError) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("%s: refused (%s)", e.Path, e.Reason)
	}
	return fmt.Sprintf("%s: refused (%s): %s", e.Path, e.Reason, e.Detail)
}

// RefusalReason returns the reason of a RefusedError in err's chain, or "".
func RefusalReason(err error) string {
	var r *RefusedError
	if errors.As(err, &r) {
		return r.Reason
	}
	return ""
}

// inRootPath returns path relative to a process's root, cleaned, without
// a leading slash; "" when it names the root itself.
func inRootPath(path string) string {
	return strings.TrimPrefix(filepath.Clean("/"+path), "/")
}
