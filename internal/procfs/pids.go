package procfs

import (
	"fmt"
	"os"
	"strconv"
)

// PIDs returns the ids of the processes listed below Root, in directory order.
// Threads are not listed (they live under <pid>/task).
func (fs FS) PIDs() ([]uint32, error) {
	entries, err := os.ReadDir(fs.root())
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", fs.root(), err)
	}
	var pids []uint32
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		v, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil || v == 0 {
			continue
		}
		pids = append(pids, uint32(v))
	}
	return pids, nil
}
