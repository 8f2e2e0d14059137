package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// DetectorCounts are the failure detector's counters summed over replicas
// (kvrouter_cluster_*_total, cluster/detector.go).
type DetectorCounts struct {
	Suspicions, Refutations, Deaths, FalseDeaths, DegradedProbes uint64
}

// Add returns the sum of d and o.
func (d DetectorCounts) Add(o DetectorCounts) DetectorCounts {
	return DetectorCounts{Suspicions: d.Suspicions + o.Suspicions, Refutations: d.Refutations + o.Refutations,
		Deaths: d.Deaths + o.Deaths, FalseDeaths: d.FalseDeaths + o.FalseDeaths, DegradedProbes: d.DegradedProbes + o.DegradedProbes}
}

// Sub returns what happened between an earlier reading o and d.
func (d DetectorCounts) Sub(o DetectorCounts) DetectorCounts {
	return DetectorCounts{Suspicions: d.Suspicions - o.Suspicions, Refutations: d.Refutations - o.Refutations,
		Deaths: d.Deaths - o.Deaths, FalseDeaths: d.FalseDeaths - o.FalseDeaths, DegradedProbes: d.DegradedProbes - o.DegradedProbes}
}

func (d DetectorCounts) String() string {
	return fmt.Sprintf("%d suspicions, %d refutations, %d deaths (%d false), %d degraded probes",
		d.Suspicions, d.Refutations, d.Deaths, d.FalseDeaths, d.DegradedProbes)
}

// maxMetricsBytes bounds a scraped /metrics page.
const maxMetricsBytes = 16 << 20

// ScrapeDetector reads the failure-detector counters from every replica's
// /metrics and sums them.
func ScrapeDetector(ctx context.Context, baseURLs []string) (DetectorCounts, error) {
	var sum DetectorCounts
	client := &http.Client{Timeout: 10 * time.Second}
	for _, base := range baseURLs {
		d, err := scrapeDetector(ctx, client, base+"/metrics")
		if err != nil {
			return sum, err
		}
		sum = sum.Add(d)
	}
	return sum, nil
}

func scrapeDetector(ctx context.Context, client *http.Client, url string) (DetectorCounts, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return DetectorCounts{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return DetectorCounts{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return DetectorCounts{}, fmt.Errorf("scrape %s: HTTP %d", url, resp.StatusCode)
	}
	return ParseDetector(io.LimitReader(resp.Body, maxMetricsBytes))
}

// ParseDetector extracts the failure-detector counters from a Prometheus
// text page; absent counters (a replica without a cluster) read as 0.
func ParseDetector(r io.Reader) (DetectorCounts, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return DetectorCounts{}, fmt.Errorf("parse metrics: %w", err)
	}
	total := func(name string) uint64 {
		var sum float64
		if f := families[name]; f != nil {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
		return uint64(sum)
	}
	return DetectorCounts{
		Suspicions:     total("kvrouter_cluster_suspicions_total"),
		Refutations:    total("kvrouter_cluster_refutations_total"),
		Deaths:         total("kvrouter_cluster_deaths_total"),
		FalseDeaths:    total("kvrouter_cluster_false_deaths_total"),
		DegradedProbes: total("kvrouter_cluster_degraded_probes_total"),
	}, nil
}
