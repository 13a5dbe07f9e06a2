package bpfprofilerreceiver // import "github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver"

import (
	"regexp"
	"strings"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// targetFilter keeps the processes named by targets::container_ids,
// targets::k8s_pod_uids and targets::executables (pids are filtered in BPF).
// Each non-empty list must match; an empty list matches everything.
type targetFilter struct {
	containerIDs []string
	podUIDs      map[string]bool
	executables  []*regexp.Regexp
}

func newTargetFilter(t TargetsConfig) *targetFilter {
	f := &targetFilter{containerIDs: t.ContainerIDs}
	if len(t.K8sPodUIDs) > 0 {
		f.podUIDs = map[string]bool{}
		for _, uid := range t.K8sPodUIDs {
			f.podUIDs[uid] = true
		}
	}
	for _, expr := range t.Executables {
		f.executables = append(f.executables, regexp.MustCompile(expr)) // checked by Validate
	}
	return f
}

// keep reports whether the process id is targeted.
func (f *targetFilter) keep(id report.Identity) bool {
	return f.containerMatches(id) && f.podMatches(id) && f.executableMatches(id)
}

func (f *targetFilter) containerMatches(id report.Identity) bool {
	if len(f.containerIDs) == 0 {
		return true
	}
	cid, _ := id.Attributes[attrkey.ContainerID].(string)
	if cid == "" {
		return false
	}
	for _, prefix := range f.containerIDs {
		if strings.HasPrefix(cid, prefix) {
			return true
		}
	}
	return false
}

func (f *targetFilter) podMatches(id report.Identity) bool {
	if f.podUIDs == nil {
		return true
	}
	uid, _ := id.Attributes[attrkey.K8sPodUID].(string)
	return f.podUIDs[uid]
}

func (f *targetFilter) executableMatches(id report.Identity) bool {
	if len(f.executables) == 0 {
		return true
	}
	for _, re := range f.executables {
		if re.MatchString(id.ExePath) {
			return true
		}
	}
	return false
}
