package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/kvrouter/kvrouter/bench"
)

// runTable prints the report.json files given as arguments as one table,
// each named by its directory.
func runTable(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kvbench table", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kvbench table DIR/report.json ...\n\none row per measured point of every report (medians and [min-max] over its runs), named by the report's directory")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("table: give at least one report.json")
	}
	var reports []bench.NamedReport
	for _, path := range fs.Args() {
		r, err := bench.ReadReport(path)
		if err != nil {
			return err
		}
		reports = append(reports, bench.NamedReport{Name: filepath.Base(filepath.Dir(path)), Report: r})
	}
	if err := bench.WriteCostTable(stdout, reports); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "\nhit_rate = share of prompt tokens served from cache; vs_timed = hit_rate / oracle_timed; p90_floor = the p90 prompt's uncached")
	fmt.Fprintln(stdout, "prefill on an idle engine; each figure: median [min-max] over the point's runs")
	return nil
}
