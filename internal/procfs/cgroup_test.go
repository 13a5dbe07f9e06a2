package procfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseCgroup(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []CgroupLine
		wantErr bool
	}{
		{
			name: "v2 only",
			in:   "0::/system.slice/nginx.service\n",
			want: []CgroupLine{{HierarchyID: 0, Path: "/system.slice/nginx.service"}},
		},
		{
			name: "hybrid",
			in:   "4:memory:/process_api/x\n2:cpu,cpuacct:/\n1:name=systemd:/init.scope\n0::/\n",
			want: []CgroupLine{
				{HierarchyID: 4, Controllers: []string{"memory"}, Path: "/process_api/x"},
				{HierarchyID: 2, Controllers: []string{"cpu", "cpuacct"}, Path: "/"},
				{HierarchyID: 1, Controllers: []string{"name=systemd"}, Path: "/init.scope"},
				{HierarchyID: 0, Path: "/"},
			},
		},
		{
			name: "colon in path",
			in:   "0::/a:b/c\n",
			want: []CgroupLine{{Path: "/a:b/c"}},
		},
		{
			name: "cgroup namespace relative",
			in:   "0::/../../kubepods-pod1.slice/x\n",
			want: []CgroupLine{{Path: "/../../kubepods-pod1.slice/x"}},
		},
		{name: "empty lines", in: "\n0::/\n\n", want: []CgroupLine{{Path: "/"}}},
		{name: "empty", in: "", want: nil},
		{name: "one colon", in: "0:/x\n", wantErr: true},
		{name: "no colon", in: "garbage\n", wantErr: true},
		{name: "bad id", in: "x::/\n", wantErr: true},
		{name: "negative id", in: "-1::/\n", wantErr: true},
		{name: "no path", in: "0::\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCgroup(strings.NewReader(tt.in))
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestCgroupLineV2(t *testing.T) {
	assert.True(t, CgroupLine{Path: "/"}.V2())
	assert.False(t, CgroupLine{HierarchyID: 1, Controllers: []string{"name=systemd"}, Path: "/"}.V2())
	assert.Equal(t, "10:cpu,cpuacct:/a", CgroupLine{HierarchyID: 10, Controllers: []string{"cpu", "cpuacct"}, Path: "/a"}.String())
}

func TestFSCgroup(t *testing.T) {
	root := t.TempDir()
	for pid, fixture := range map[string]string{"7": "cgroup-hybrid", "8": "cgroup-v2"} {
		b, err := os.ReadFile(filepath.Join("testdata", fixture))
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Join(root, pid), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, pid, "cgroup"), b, 0o644))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(root, "9"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "9", "cgroup"), []byte("nonsense\n"), 0o644))
	fs := FS{Root: root}

	lines, err := fs.Cgroup(7)
	require.NoError(t, err)
	require.Len(t, lines, 5)
	assert.Equal(t, []string{"cpu", "cpuacct"}, lines[2].Controllers)
	assert.True(t, lines[4].V2())

	lines, err = fs.Cgroup(8)
	require.NoError(t, err)
	require.Len(t, lines, 1)
	assert.Contains(t, lines[0].Path, "cri-containerd-")

	_, err = fs.Cgroup(9)
	require.Error(t, err)
	assert.Contains(t, err.Error(), root)

	_, err = fs.Cgroup(10)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestFSCgroupSelf(t *testing.T) {
	lines, err := FS{}.Cgroup(uint32(os.Getpid()))
	require.NoError(t, err)
	assert.NotEmpty(t, lines)
}

func FuzzParseCgroup(f *testing.F) {
	for _, name := range []string{"cgroup-hybrid", "cgroup-v2"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		require.NoError(f, err)
		f.Add(string(b))
	}
	f.Add("0::/\n")
	f.Add("1:a,,b::/x:y\n")
	f.Add("007::/\n")
	f.Fuzz(func(t *testing.T, s string) {
		lines, err := ParseCgroup(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, l := range lines {
			if l.Path == "" || l.HierarchyID < 0 {
				t.Fatalf("invalid line accepted: %+v", l)
			}
			// Formatting and parsing again gives the same line.
			again, err := ParseCgroup(strings.NewReader(l.String()))
			if err != nil || len(again) != 1 {
				t.Fatalf("reparse %q: %v %v", l.String(), again, err)
			}
			if again[0].String() != l.String() || again[0].V2() != l.V2() {
				t.Fatalf("round trip %q → %q", l.String(), again[0].String())
			}
		}
	})
}
