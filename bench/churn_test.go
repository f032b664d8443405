package bench

import "testing"

func TestPercentilesAreNearestRank(t *testing.T) {
	var xs []float64
	for i := 100; i >= 1; i-- {
		xs = append(xs, float64(i))
	}
	p := Percentiles(xs)
	if p.P50 != 50 || p.P90 != 90 || p.P99 != 99 || p.Max != 100 {
		t.Errorf("%+v", p)
	}
	if p := Percentiles([]float64{7}); p.P50 != 7 || p.P99 != 7 {
		t.Errorf("one sample: %+v", p)
	}
}

// A change sent while a cycle ran counts as during it; one sent after it ended does not.
func TestChangesDuringCycles(t *testing.T) {
	c := &Churn{Latencies: []float64{1, 2, 3}, SentAt: []float64{5, 12, 21}, Cycles: []Cycle{{EndedAt: 20, Seconds: 10}}}
	during, between := c.DuringCycles()
	if len(during) != 1 || during[0] != 2 || len(between) != 2 {
		t.Errorf("during %v, between %v", during, between)
	}
}

// The stride visits every Service once per round.
func TestCoprimeStrideVisitsEveryService(t *testing.T) {
	for _, n := range []int{1, 2, 3, 100, 500, 1000, 5000} {
		s, seen := coprimeStride(n), map[int]bool{}
		for k := range n {
			seen[(k*s)%n] = true
		}
		if len(seen) != n {
			t.Errorf("n=%d stride %d visits %d", n, s, len(seen))
		}
	}
}
