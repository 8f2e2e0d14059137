package bench

import (
	"math"
	"testing"
)

func TestPercentile(t *testing.T) {
	xs := []float64{40, 10, 30, 20, 50} // unsorted on purpose
	tests := []struct {
		p, want float64
	}{
		{0, 10}, {50, 30}, {100, 50}, {90, 46}, {99, 49.6}, {25, 20}, {12.5, 15},
	}
	for _, tt := range tests {
		if got := Percentile(xs, tt.p); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("p%v = %v, want %v", tt.p, got, tt.want)
		}
	}
	if xs[0] != 40 {
		t.Fatal("Percentile sorted its input in place")
	}
	for _, bad := range []struct {
		xs []float64
		p  float64
	}{{nil, 50}, {xs, -1}, {xs, 101}, {xs, math.NaN()}} {
		if got := Percentile(bad.xs, bad.p); !math.IsNaN(got) {
			t.Errorf("Percentile(%v, %v) = %v, want NaN", bad.xs, bad.p, got)
		}
	}
	if got := Percentile([]float64{7}, 99); got != 7 {
		t.Errorf("single sample p99 = %v, want 7", got)
	}
}

func TestSpread(t *testing.T) {
	if s, ok := Spread([]float64{10, 10, 10, 10}); !ok || s != 1 {
		t.Fatalf("even load: %v %v", s, ok)
	}
	if s, ok := Spread([]float64{40, 0, 0, 0}); !ok || s != 4 {
		t.Fatalf("one hot worker of four: %v %v", s, ok)
	}
	if _, ok := Spread([]float64{0, 0}); ok {
		t.Fatal("idle fleet has no spread")
	}
}
