package testutil

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Debian's Rubies run on this machine from their unpacked packages, and
// report their minor version.
func TestRubyInterpreters(t *testing.T) {
	for _, r := range RubyInterpreters(t) {
		t.Run(r.Name, func(t *testing.T) {
			out, err := RunWithin(exec.Command(r.Path, append(r.Args, "-e", "puts RUBY_VERSION")...), BuildTimeout)
			require.NoError(t, err, "%s", out)
			require.True(t, strings.HasPrefix(strings.TrimSpace(string(out)), r.Version+"."), "%s", out)
		})
	}
}
