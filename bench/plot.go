package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
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
		withOracle, isRate  bool
	}{
		{PlotTTFT, "TTFT p90 vs offered load", "TTFT p90 (ms)", func(p Point) float64 { return p.TTFTP90 }, false, false},
		{PlotThroughput, "Output throughput vs offered load", "output tokens/s", func(p Point) float64 { return p.ThroughputTokS }, false, false},
		{PlotHitRate, "Prefix cache hit rate vs offered load", "hit rate", func(p Point) float64 { return p.HitRate }, true, true},
	}
	var paths []string
	for _, c := range charts {
		path := filepath.Join(dir, c.file)
		err := r.linePlot(path, c.title, c.ylabel, c.value, c.withOracle, c.isRate)
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

// Plot geometry: the image size, the head room above the highest value
// and right of the highest load (so a line at the top and the last
// markers stay clear of the border), and the gap around the legend.
const (
	plotWidth    = 8 * vg.Inch
	plotHeight   = 4.5 * vg.Inch
	plotHeadroom = 1.08
	legendGap    = vg.Length(10) // points
)

// linePlot draws one chart with the legend in a column right of the data
// area, where it cannot hide a line. Both axes start at 0; a rate
// (isRate) is drawn up to at least 1.
func (r *Report) linePlot(path, title, ylabel string, value func(Point) float64, withOracle, isRate bool) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "offered load (requests/s)"
	p.Y.Label.Text = ylabel
	var args []any
	var maxX, maxY float64
	for _, name := range AllPolicies {
		if name == PolicyOracle && !withOracle {
			continue
		}
		var xys plotter.XYs
		for _, pt := range r.Policies {
			if pt.Name == name {
				xys = append(xys, plotter.XY{X: pt.QPS, Y: value(pt)})
				maxX, maxY = max(maxX, pt.QPS), max(maxY, value(pt))
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
	if isRate {
		maxY = max(maxY, 1)
	}
	p.X.Min, p.X.Max = 0, max(maxX, 1)*plotHeadroom
	p.Y.Min, p.Y.Max = 0, max(maxY, 1e-9)*plotHeadroom

	// The legend is taken off the plot and drawn in its own column.
	legend := p.Legend
	p.Legend = plot.NewLegend()
	legend.Top, legend.Left = true, true
	img := vgimg.New(plotWidth, plotHeight)
	dc := draw.New(img)
	legendWidth := legend.Rectangle(dc).Size().X + 2*legendGap
	p.Draw(draw.Crop(dc, 0, -legendWidth, 0, 0))
	legend.Draw(draw.Crop(dc, plotWidth-legendWidth+legendGap, -legendGap, 0, -legendGap))

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("save %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	return nil
}
