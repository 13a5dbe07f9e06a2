package testutil

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSourceFlags(t *testing.T) {
	for _, tt := range []struct {
		name, text string
		want       []string
	}{
		{"flags", "// x: y\n// cflags: -O2 -fomit-frame-pointer\n#include <stdio.h>\n", []string{"-O2", "-fomit-frame-pointer"}},
		{"none", "// x\n#include <stdio.h>\n", nil},
		{"after the includes", "#include <stdio.h>\n// cflags: -O3\n", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "w.c")
			require.NoError(t, os.WriteFile(src, []byte(tt.text), 0o644))
			got, err := SourceFlags(src)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}
