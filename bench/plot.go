package bench

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plot files written by WritePlots inside the output directory.
const (
	PlotTTFT       = "ttft_p90_vs_qps.png"
	PlotThroughput = "throughput_vs_qps.png"
	PlotHitRate    = "hit_rate_vs_qps.png"
)

// WritePlots draws TTFT p90, throughput and hit rate against QPS, one
// line per policy, as PNGs in dir. The oracle has no latency or
// throughput, so it appears on the hit-rate plot only. It returns the
// paths written.
func (r *Report) WritePlots(dir string) ([]string, error) {
	charts := []struct {
		file, title, ylabel string
		value               func(Point) float64
		withOracle          bool
	}{
		{PlotTTFT, "TTFT p90 vs offered load", "TTFT p90 (ms)", func(p Point) float64 { return p.TTFTP90 }, false},
		{PlotThroughput, "Output throughput vs offered load", "output tokens/s", func(p Point) float64 { return p.ThroughputTokS }, false},
		{PlotHitRate, "Prefix cache hit rate vs offered load", "hit rate", func(p Point) float64 { return p.HitRate }, true},
	}
	var paths []string
	for _, c := range charts {
		path := filepath.Join(dir, c.file)
		err := r.linePlot(path, c.title, c.ylabel, c.value, c.withOracle)
		if errors.Is(err, errNothingToPlot) {
			continue // e.g. an oracle-only run has no latency to draw
		}
		if err != nil {
			return paths, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// errNothingToPlot: no policy in the report has a point for this chart.
var errNothingToPlot = errors.New("no points to draw")

func (r *Report) linePlot(path, title, ylabel string, value func(Point) float64, withOracle bool) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "offered QPS"
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	// Top left: the curves that matter (the baselines queueing) climb to
	// the top right.
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	var args []any
	for _, name := range AllPolicies {
		if name == PolicyOracle && !withOracle {
			continue
		}
		var xys plotter.XYs
		for _, pt := range r.Policies {
			if pt.Name == name {
				xys = append(xys, plotter.XY{X: pt.QPS, Y: value(pt)})
			}
		}
		if len(xys) == 0 {
			continue
		}
		slices.SortFunc(xys, func(a, b plotter.XY) int {
			switch {
			case a.X < b.X:
				return -1
			case a.X > b.X:
				return 1
			}
			return 0
		})
		args = append(args, name, xys)
	}
	if len(args) == 0 {
		return fmt.Errorf("plot %s: %w", filepath.Base(path), errNothingToPlot)
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return fmt.Errorf("plot %s: %w", filepath.Base(path), err)
	}
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	return nil
}
