package testutil

import "testing"

func TestParseOOMKills(t *testing.T) {
	for _, c := range []struct {
		name, data string
		want       uint64
	}{
		{"v1 oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", 3},
		{"v2 memory.events", "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n", 1},
		{"none yet", "oom_kill_disable 0\nunder_oom 0\n", 0},
		{"empty", "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := ParseOOMKills([]byte(c.data)); got != c.want {
				t.Errorf("ParseOOMKills = %d, want %d", got, c.want)
			}
		})
	}
}
