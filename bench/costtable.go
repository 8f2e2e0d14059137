package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
)

// NamedReport is a report with the name it goes by in a combined table
// (kvbench table uses its directory's name).
type NamedReport struct {
	Name string
	*Report
}

// ReadReport reads a report.json.
func ReadReport(path string) (*Report, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read report: %w", err)
	}
	var r Report
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// WriteCostTable prints several reports as one table, one row per
// measured point: the figures the choice of a cost rests on (hit rate
// and its share of oracle_timed, TTFT p50/p90/p99 beside the point's p90
// floor, throughput, load spread), each a median with its range over the
// point's runs.
func WriteCostTable(w io.Writer, reports []NamedReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "run\tworkload\tseed\tqps\tpolicy\truns\thit_rate\tvs_timed\tttft_p50_ms\tttft_p90_ms\tttft_p99_ms\tp90_floor_ms\ttok/s\tload_spread\terrors\t\n")
	for _, nr := range reports {
		for _, p := range nr.sorted() {
			if p.Name == PolicyOracle {
				continue
			}
			rg := p.Range
			if rg == nil {
				rg = &Ranges{}
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%.0f\t%s\t%s\t%d\t\n",
				nr.Name, nr.Workload, nr.Seed, p.QPS, p.Name, max(p.Runs, 1),
				withRange("%.3f", p.HitRate, p.Range, rg.HitRate), p.hitVsTimedCell(),
				withRange("%.0f", p.TTFTP50, p.Range, rg.TTFTP50), withRange("%.0f", p.TTFTP90, p.Range, rg.TTFTP90),
				withRange("%.0f", p.TTFTP99, p.Range, rg.TTFTP99), p.TTFTFloorP90,
				withRange("%.0f", p.ThroughputTokS, p.Range, rg.ThroughputTokS), withRange("%.2f", p.LoadSpread, p.Range, rg.LoadSpread),
				p.Errors)
		}
	}
	return tw.Flush()
}
