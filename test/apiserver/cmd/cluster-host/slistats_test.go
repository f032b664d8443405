package main

import (
	"math"
	"strconv"
	"testing"
)

func TestHistogramSinceAndPromQuantile(t *testing.T) {
	scrape := func(b1, b2, b3, inf uint64, sum float64) string {
		return "# TYPE " + programmingMetric + " histogram\n" +
			programmingMetric + `_bucket{ip_family="IPv4",le="1"} ` + itoa(b1) + "\n" +
			programmingMetric + `_bucket{ip_family="IPv4",le="2"} ` + itoa(b2) + "\n" +
			programmingMetric + `_bucket{ip_family="IPv4",le="4"} ` + itoa(b3) + "\n" +
			programmingMetric + `_bucket{ip_family="IPv4",le="+Inf"} ` + itoa(inf) + "\n" +
			programmingMetric + `_sum{ip_family="IPv4"} ` + ftoa(sum) + "\n" +
			programmingMetric + `_count{ip_family="IPv4"} ` + itoa(inf) + "\n"
	}
	before, err := parseHistogram(scrape(10, 10, 10, 10, 5), programmingMetric)
	if err != nil {
		t.Fatal(err)
	}
	// 100 observations in the phase: 20 at most 1 s, 60 in (1, 2], 10 in (2, 4], 10 above.
	after, err := parseHistogram(scrape(30, 90, 100, 110, 205), programmingMetric)
	if err != nil {
		t.Fatal(err)
	}
	d, err := after.since(before)
	if err != nil {
		t.Fatal(err)
	}
	if d.count != 100 || d.sum != 200 {
		t.Fatalf("since: %d observations, sum %v; want 100 and 200", d.count, d.sum)
	}
	for _, c := range []struct{ q, want float64 }{
		{0.1, 0.5}, // rank 10 of the first bucket's 20: halfway through [0, 1]
		{0.5, 1.5}, // rank 50: 30 into the second bucket's 60
		{0.85, 3},  // rank 85: 5 into the third bucket's 10, in (2, 4]
		{0.99, 4},  // rank 99 is in +Inf: the largest finite bound
		{0.2, 1},   // rank 20: the end of the first bucket
		{0.8, 2},   // rank 80: the end of the second
	} {
		if got := d.promQuantile(c.q); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("quantile %v = %v, want %v", c.q, got, c.want)
		}
	}
	if _, err := before.since(after); err == nil {
		t.Error("a histogram that went down (a restarted proxy) was subtracted")
	}
	if got := (histogram{}).promQuantile(0.5); !math.IsNaN(got) {
		t.Errorf("no observations: %v, want NaN", got)
	}
}

func itoa(n uint64) string  { return ftoa(float64(n)) }
func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
