package testutil

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNodeRelease(t *testing.T) {
	for _, tc := range []struct {
		name     string
		major    int
		override string
		want     string
		pinned   bool
		err      string
	}{
		{name: "pinned", major: 24, want: NodeReleases[24].Version, pinned: true},
		{name: "override", major: 24, override: "22=22.23.5,24=24.22.3", want: "24.22.3"},
		{name: "override of another major", major: 18, override: "24=24.22.3", want: NodeReleases[18].Version, pinned: true},
		{name: "wrong major", major: 24, override: "24=22.1.0", err: "no release of node 24"},
		{name: "not a version", major: 22, override: "22=latest", err: "no release of node 22"},
		{name: "unpinned major", major: 26, err: "no pinned release"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rel, err := nodeRelease(tc.major, tc.override)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, rel.Version)
			assert.Equal(t, tc.pinned, rel.Integrity != "", "a pin carries its integrity")
		})
	}
}

func TestNodeReleasesPinned(t *testing.T) {
	for _, major := range NodeMajors {
		if major == 20 {
			continue // Debian's
		}
		rel, ok := NodeReleases[major]
		require.True(t, ok, "node %d has no pin", major)
		k, ok := semver(rel.Version)
		require.True(t, ok && k[0] == major, "node %d pinned to %q", major, rel.Version)
		assert.Regexp(t, `^sha512-[A-Za-z0-9+/]{86}==$`, rel.Integrity, "node %d", major)
	}
}

func TestIntegrity(t *testing.T) {
	// sha512 of "" in the registry's format.
	assert.Equal(t, "sha512-z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XYXysP+DGNKHfuwvY7kxvUdBeoGlODJ6+SfaPg==", integrity(nil))
}
