//go:build linux

package symbolize

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
)

// readOwnVDSO returns the bytes of the collector's own [vdso] mapping.
func readOwnVDSO() ([]byte, error) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasSuffix(line, " [vdso]") {
			continue
		}
		var start, end uint64
		if _, err := fmt.Sscanf(line, "%x-%x", &start, &end); err != nil || end <= start || end-start > maxVDSOBytes {
			return nil, fmt.Errorf("[vdso] mapping %q", line)
		}
		mem, err := os.Open("/proc/self/mem")
		if err != nil {
			return nil, err
		}
		defer mem.Close()
		data := make([]byte, end-start)
		if _, err := mem.ReadAt(data, int64(start)); err != nil {
			return nil, err
		}
		return data, nil
	}
	return nil, errors.New("no [vdso] mapping")
}
