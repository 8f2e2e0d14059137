package enginepoll

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvrouter/kvrouter/scheduling"
)

// The engines' load metrics. vLLM renamed gpu_cache_usage_perc to
// kv_cache_usage_perc (both are read); SGLang's token_usage is the
// fraction of KV tokens in use.
var (
	runningNames = []string{"vllm:num_requests_running", "sglang:num_running_reqs"}
	waitingNames = []string{"vllm:num_requests_waiting", "sglang:num_queue_reqs"}
	kvUsageNames = []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"}
	loadNames    = append(append(append([]string{}, runningNames...), waitingNames...), kvUsageNames...)
)

// rankLabels name the dp rank of a series: vLLM labels its data-parallel
// engines "engine", SGLang "dp_rank".
var rankLabels = []string{"engine", "dp_rank"}

// AllRanks keys the load of series without a rank label: the engine
// reports one figure for all its ranks.
const AllRanks = -1

// Loads is an engine's reported load by dp rank (the label's value, or
// AllRanks).
type Loads map[int64]scheduling.EngineLoad

// ErrNoLoadMetrics: the page parsed but has none of the engines' load
// metrics (not a vLLM or SGLang server, or an unknown version).
var ErrNoLoadMetrics = errors.New("no vLLM or SGLang load metric in /metrics")

// ParseMetrics reads the load metrics from a Prometheus text exposition.
// Only the lines of the load metrics are handed to the parser (expfmt):
// an engine's page is mostly histograms nobody here reads, and parsing
// them for every engine every second is what polling would cost. A
// malformed load-metric line is an error; so is a page without any.
func ParseMetrics(page []byte) (Loads, error) {
	wanted := selectLines(page)
	if len(wanted) == 0 {
		return nil, ErrNoLoadMetrics
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(wanted))
	if err != nil {
		return nil, fmt.Errorf("malformed /metrics: %w", err)
	}
	out := Loads{}
	found := false
	for _, name := range loadNames {
		mf := families[name]
		if mf == nil {
			continue
		}
		for _, m := range mf.GetMetric() {
			v, ok := value(m)
			if !ok {
				continue
			}
			found = true
			rank := rankOf(m)
			l := out[rank]
			switch {
			case contains(runningNames, name):
				l.Running += v
			case contains(waitingNames, name):
				l.Waiting += v
			default:
				// Several series (per model) of one rank: the fullest.
				l.KVUsage, l.HasKVUsage = max(l.KVUsage, v), true
			}
			out[rank] = l
		}
	}
	if !found {
		return nil, ErrNoLoadMetrics
	}
	return out, nil
}

func contains(names []string, n string) bool {
	for _, x := range names {
		if x == n {
			return true
		}
	}
	return false
}

func value(m *dto.Metric) (float64, bool) {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue(), true
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue(), true
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue(), true
	}
	return 0, false
}

func rankOf(m *dto.Metric) int64 {
	for _, lp := range m.GetLabel() {
		for _, name := range rankLabels {
			if lp.GetName() == name {
				if n, err := strconv.ParseInt(lp.GetValue(), 10, 32); err == nil && n >= 0 {
					return n
				}
			}
		}
	}
	return AllRanks
}

// selectLines keeps the sample, HELP and TYPE lines of the load metrics.
func selectLines(page []byte) []byte {
	var out []byte
	for len(page) > 0 {
		line := page
		if i := bytes.IndexByte(page, '\n'); i >= 0 {
			line, page = page[:i+1], page[i+1:]
		} else {
			page = nil
		}
		name := line
		if bytes.HasPrefix(name, []byte("# HELP ")) || bytes.HasPrefix(name, []byte("# TYPE ")) {
			name = name[len("# HELP "):]
		} else if len(name) > 0 && name[0] == '#' {
			continue
		}
		if isLoadLine(name) {
			out = append(out, line...)
			if line[len(line)-1] != '\n' {
				out = append(out, '\n')
			}
		}
	}
	return out
}

// isLoadLine reports whether a line (past "# HELP "/"# TYPE ") is about
// a load metric: its name, up to '{' or a blank, is one of loadNames.
func isLoadLine(s []byte) bool {
	if len(s) < 6 || (s[0] != 'v' && s[0] != 's') {
		return false
	}
	end := bytes.IndexAny(s, "{ \t")
	if end < 0 {
		return false
	}
	return loadNameSet[string(s[:end])] // no allocation: a map index by a converted []byte
}

var loadNameSet = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range loadNames {
		m[n] = true
	}
	return m
}()
