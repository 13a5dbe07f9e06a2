package procread

import (
	"slices"
	"testing"
	"time"
)

func TestSchedule(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	opts := Options{Delay: 100 * time.Millisecond, Max: 4, Rate: 10, Burst: 2}
	// A step announces, forgets, or asks what is due (and when next).
	type step struct {
		at       int // ms after t0
		announce []uint32
		gone     []uint32
		due      []uint32 // checked when wantNext is set or due is not nil
		check    bool
		wantNext int // ms after t0; -1: nothing waits
	}
	tests := []struct {
		name  string
		steps []step
		want  Stats
	}{
		{
			name: "read once due",
			steps: []step{
				{at: 0, announce: []uint32{1}},
				{at: 99, check: true, wantNext: 100},
				{at: 100, check: true, due: []uint32{1}, wantNext: -1},
			},
			want: Stats{Read: 1},
		},
		{
			name: "exited before due: never read",
			steps: []step{
				{at: 0, announce: []uint32{1, 2}},
				{at: 50, gone: []uint32{1}},
				{at: 100, check: true, due: []uint32{2}, wantNext: -1},
			},
			want: Stats{Read: 1, Exited: 1},
		},
		{
			name: "announced twice (two sources), read once",
			steps: []step{
				{at: 0, announce: []uint32{1}},
				{at: 30, announce: []uint32{1}},
				{at: 100, check: true, due: []uint32{1}, wantNext: -1},
				{at: 150, announce: []uint32{1}},
				{at: 300, check: true, wantNext: -1},
			},
			want: Stats{Read: 1},
		},
		{
			name: "exec'ed after its read: the new program is read again",
			steps: []step{
				{at: 0, announce: []uint32{1}},
				{at: 100, check: true, due: []uint32{1}, wantNext: -1},
				{at: 120, gone: []uint32{1}},
				{at: 130, announce: []uint32{1}},
				{at: 230, check: true, due: []uint32{1}, wantNext: -1},
			},
			want: Stats{Read: 2},
		},
		{
			name: "full: the fifth waiting process is dropped",
			steps: []step{
				{at: 0, announce: []uint32{1, 2, 3, 4, 5}},
				{at: 100, check: true, due: []uint32{1, 2}, wantNext: 200},
			},
			want: Stats{Read: 2, Dropped: 1},
		},
		{
			name: "rate limited: a burst, then one per 100 ms",
			steps: []step{
				{at: 0, announce: []uint32{1, 2, 3, 4}},
				{at: 100, check: true, due: []uint32{1, 2}, wantNext: 200},
				{at: 150, check: true, wantNext: 200},
				{at: 200, check: true, due: []uint32{3}, wantNext: 300},
				{at: 300, gone: []uint32{4}},
				{at: 300, check: true, wantNext: -1},
			},
			want: Stats{Read: 3, Exited: 1},
		},
		{
			name: "time going back earns no tokens",
			steps: []step{
				{at: 0, announce: []uint32{1, 2, 3, 4}},
				{at: 200, check: true, due: []uint32{1, 2}, wantNext: 300},
				{at: 150, check: true, wantNext: 300},
				{at: 250, check: true, wantNext: 300},
			},
			want: Stats{Read: 2},
		},
		{
			name: "a stale entry ahead does not hide a later one",
			steps: []step{
				{at: 0, announce: []uint32{1}},
				{at: 10, gone: []uint32{1}},
				{at: 20, announce: []uint32{1}},
				{at: 50, check: true, wantNext: 120},
				{at: 120, check: true, due: []uint32{1}, wantNext: -1},
			},
			want: Stats{Read: 1, Exited: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(opts)
			for i, st := range tt.steps {
				now := ms(st.at)
				for _, pid := range st.announce {
					s.Announce(pid, now)
				}
				for _, pid := range st.gone {
					s.Gone(pid)
				}
				if !st.check {
					continue
				}
				if got := s.Due(now); !slices.Equal(got, st.due) {
					t.Errorf("step %d: Due = %v, want %v", i, got, st.due)
				}
				next, ok := s.Next(now)
				switch {
				case st.wantNext < 0 && ok:
					t.Errorf("step %d: Next = %v, want nothing waiting", i, next.Sub(t0))
				case st.wantNext >= 0 && (!ok || !next.Equal(ms(st.wantNext))):
					t.Errorf("step %d: Next = %v (%v), want %v", i, next.Sub(t0), ok, ms(st.wantNext).Sub(t0))
				}
			}
			if got := s.Stats(); got != tt.want {
				t.Errorf("Stats = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// The pids remembered as read are bounded: past Max they are forgotten
// (and a later announcement reads them again).
func TestScheduleReadBounded(t *testing.T) {
	s := New(Options{Delay: 0, Max: 3, Rate: 1000, Burst: 1000})
	now := time.Unix(1, 0)
	for pid := range uint32(10) {
		s.Announce(pid, now)
		s.Due(now)
		if len(s.read) > 3 {
			t.Fatalf("%d pids remembered, want at most 3", len(s.read))
		}
	}
}
