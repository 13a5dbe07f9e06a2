package procfs

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Status holds the fields of /proc/<pid>/status the project uses.
type Status struct {
	Name  string
	Tgid  uint32
	PPid  uint32
	NSpid []uint32 // pids from the reader's pid namespace inwards; nil when absent
	Uid   uint32   // real uid
	EUid  uint32   // effective uid
}

// ParseStatus parses the content of a status file. Missing fields keep their
// zero value; malformed values of known fields are errors.
func ParseStatus(r io.Reader) (Status, error) {
	var st Status
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 16*1024), 1024*1024)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		var err error
		switch key {
		case "Name":
			st.Name = val
		case "Tgid":
			st.Tgid, err = parseU32(val)
		case "PPid":
			st.PPid, err = parseU32(val)
		case "Uid":
			f := strings.Fields(val)
			if len(f) == 0 {
				err = fmt.Errorf("empty")
				break
			}
			st.Uid, err = parseU32(f[0])
			if err == nil && len(f) > 1 {
				st.EUid, err = parseU32(f[1])
			} else if err == nil {
				st.EUid = st.Uid
			}
		case "NSpid":
			f := strings.Fields(val)
			if len(f) == 0 {
				err = fmt.Errorf("empty")
				break
			}
			pids := make([]uint32, 0, len(f))
			for _, s := range f {
				v, perr := parseU32(s)
				if perr != nil {
					err = perr
					break
				}
				pids = append(pids, v)
			}
			st.NSpid = pids
		}
		if err != nil {
			return Status{}, fmt.Errorf("status field %s: %w", key, err)
		}
	}
	if err := sc.Err(); err != nil {
		return Status{}, fmt.Errorf("status: %w", err)
	}
	return st, nil
}

func parseU32(s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("bad number %q", s)
	}
	return uint32(v), nil
}
