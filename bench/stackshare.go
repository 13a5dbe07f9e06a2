package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/pprof/profile"
)

// nodeChain is the call chain of nodefixed.js, leaf first.
var nodeChain = []string{"spin", "work", "main"}

// chainCount is what a collector run's pprof files hold of one process:
// its samples, and those whose stack has a call chain.
type chainCount struct {
	matched, total int64
}

func (c chainCount) add(o chainCount) chainCount {
	return chainCount{c.matched + o.matched, c.total + o.total}
}

// share returns matched/total in %, and false when there is no sample.
func (c chainCount) share() (float64, bool) {
	if c.total == 0 {
		return 0, false
	}
	return 100 * float64(c.matched) / float64(c.total), true
}

// chainShare counts, over every pprof file the collector wrote, the samples
// of process pid and those whose stack has chain (leaf first), weighted by
// sample value.
func (c *collector) chainShare(pid int, chain []string) (chainCount, error) {
	paths, err := filepath.Glob(filepath.Join(c.profiles, "*.pb.gz"))
	if err != nil {
		return chainCount{}, err
	}
	var n chainCount
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return chainCount{}, err
		}
		prof, err := profile.Parse(f)
		f.Close()
		if err != nil {
			return chainCount{}, fmt.Errorf("%s: %w", p, err)
		}
		n = n.add(countChain(prof, pid, chain))
	}
	return n, nil
}

// countChain counts the samples of prof labelled with process pid, and
// those whose frames, leaf first (a location's inlined lines innermost
// first), name chain's functions in its order, other frames allowed
// between them.
func countChain(prof *profile.Profile, pid int, chain []string) chainCount {
	return countChainWhere(prof, pid, chain, func(*profile.Sample) bool { return true })
}

// countChainWhere is countChain over the samples keep keeps.
func countChainWhere(prof *profile.Profile, pid int, chain []string, keep func(*profile.Sample) bool) chainCount {
	var n chainCount
	for _, s := range prof.Sample {
		if len(s.Value) == 0 || !hasPID(s, pid) || !keep(s) {
			continue
		}
		n.total += s.Value[0]
		k := 0
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				if k < len(chain) && l.Function != nil && frameNames(l.Function.Name, chain[k]) {
					k++
				}
			}
		}
		if k == len(chain) {
			n.matched += s.Value[0]
		}
	}
	return n
}

func hasPID(s *profile.Sample, pid int) bool {
	for _, v := range s.NumLabel["pid"] {
		if v == int64(pid) {
			return true
		}
	}
	return false
}

// frameNames reports whether a frame's function name is fn: the bare name,
// or a JIT perf map's "JS:*fn /path/file.js:3:14" (a tier prefix up to the
// colon, V8's optimization mark, the script after a space).
func frameNames(name, fn string) bool {
	if name == fn {
		return true
	}
	name, _, _ = strings.Cut(name, " ")
	if _, after, ok := strings.Cut(name, ":"); ok {
		name = after
	}
	return strings.TrimLeft(name, "*~^+") == fn
}
