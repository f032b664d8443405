package modules

import "testing"

func TestSchedulerNeedsKernel(t *testing.T) {
	cases := []struct{ sched, release, want string }{
		{"twos", "5.10.0-46-amd64", "6.7"},
		{"twos", "6.1.0-57-amd64", "6.7"},
		{"twos", "6.6.30", "6.7"},
		{"twos", "6.7.0", ""},
		{"twos", "6.12.57+deb13-amd64", ""},
		{"twos", "7.0.1", ""},
		{"mh", "5.10.0-46-amd64", ""},
		{"twos", "garbage", ""},
	}
	for _, c := range cases {
		if got := SchedulerNeedsKernel(c.sched, c.release); got != c.want {
			t.Errorf("SchedulerNeedsKernel(%q, %q) = %q, want %q", c.sched, c.release, got, c.want)
		}
	}
}
