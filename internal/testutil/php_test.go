package testutil

import (
	"os/exec"
	"strings"
	"testing"
)

func TestDebianPHP(t *testing.T) {
	for _, v := range PHPVersions {
		t.Run(v, func(t *testing.T) {
			p := DebianPHP(t, v)
			for _, opcache := range []bool{false, true} {
				args := append(p.Args(opcache, ""), "-r", "echo PHP_VERSION, ' ', (int)function_exists('opcache_get_status');")
				out, err := RunWithin(exec.Command(p.Path, args...), BuildTimeout)
				if err != nil {
					t.Fatalf("%s %v: %v\n%s", p.Path, args, err, out)
				}
				want := " 0"
				if opcache {
					want = " 1"
				}
				if !strings.HasPrefix(string(out), v+".") || !strings.HasSuffix(string(out), want) {
					t.Errorf("%s %v: %q, want %s.x%s", p.Path, args, out, v, want)
				}
			}
		})
	}
}
