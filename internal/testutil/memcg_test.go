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

func TestParseMemoryStat(t *testing.T) {
	v1 := "cache 1048576\nrss 4096\nrss_huge 0\ntotal_cache 2097152\n"
	v2 := "anon 8192\nfile 3145728\nkernel 65536\n"
	for _, c := range []struct {
		name, data, key string
		want            uint64
	}{
		{"v1 cache, not total_cache", v1, "cache", 1 << 20},
		{"v2 file", v2, "file", 3 << 20},
		{"absent", v2, "cache", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := ParseMemoryStat([]byte(c.data), c.key); got != c.want {
				t.Errorf("ParseMemoryStat(%q) = %d, want %d", c.key, got, c.want)
			}
		})
	}
}
