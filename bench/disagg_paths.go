package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// disaggMetric is the router's count of decisions in a disaggregated
// fleet by prefill path (remote, short_prompt, no_prefill_worker,
// same_rank).
const disaggMetric = "kvrouter_disaggregation_decisions_total"

// disaggPaths sums the routers' disaggregation decisions by path, read
// from their /metrics (nil when none were made: an aggregated fleet).
func disaggPaths(ctx context.Context, hc *http.Client, routerURLs []string) (map[string]uint64, error) {
	var out map[string]uint64
	for _, u := range routerURLs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/metrics", nil)
		if err != nil {
			return nil, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("read %s/metrics: %w", u, err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			path, n, ok := parseDisaggLine(sc.Text())
			if !ok {
				continue
			}
			if out == nil {
				out = map[string]uint64{}
			}
			out[path] += n
		}
		resp.Body.Close()
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("read %s/metrics: %w", u, err)
		}
	}
	return out, nil
}

// parseDisaggLine reads `kvrouter_disaggregation_decisions_total{path="remote"} 12`.
func parseDisaggLine(line string) (path string, n uint64, ok bool) {
	rest, found := strings.CutPrefix(line, disaggMetric+`{path="`)
	if !found {
		return "", 0, false
	}
	path, value, found := strings.Cut(rest, `"} `)
	if !found {
		return "", 0, false
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
	if err != nil || f < 0 {
		return "", 0, false
	}
	return path, uint64(f), true
}
