package procfs

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// ParseStatTimes extracts utime and stime (fields 14 and 15, in clock ticks)
// from the contents of /proc/<pid>/stat. The command name (field 2) is in
// parentheses and may itself contain spaces and parentheses, so fields are
// counted from the last ')'.
func ParseStatTimes(data []byte) (utime, stime uint64, err error) {
	end := bytes.LastIndexByte(data, ')')
	if end < 0 {
		return 0, 0, fmt.Errorf("no ')' closing the command name")
	}
	// fields[0] is field 3 (state), so field n is fields[n-3].
	fields := strings.Fields(string(data[end+1:]))
	const utimeField, stimeField = 14, 15
	if len(fields) < stimeField-2 {
		return 0, 0, fmt.Errorf("only %d fields after the command name", len(fields))
	}
	if utime, err = strconv.ParseUint(fields[utimeField-3], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("utime: %w", err)
	}
	if stime, err = strconv.ParseUint(fields[stimeField-3], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("stime: %w", err)
	}
	return utime, stime, nil
}
