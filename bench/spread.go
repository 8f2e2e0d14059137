package bench

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// loadSampler polls every worker's /stats while a point runs and averages
// the imbalance max/mean of active KV tokens (blocks held by running
// requests × block size) over the samples taken while anything ran.
type loadSampler struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	sum    float64
	n      int
}

const loadSampleEvery = 100 * time.Millisecond

func startLoadSampler(ctx context.Context, client *http.Client, workers []string, blockSize int) *loadSampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &loadSampler{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		every(ctx, loadSampleEvery, nil, func(ctx context.Context) error {
			if spread, ok := sampleSpread(ctx, client, workers, blockSize); ok {
				s.mu.Lock()
				s.sum += spread
				s.n++
				s.mu.Unlock()
			}
			return nil
		})
	}()
	return s
}

// stop ends sampling and returns the mean spread (0 if nothing ran).
func (s *loadSampler) stop() float64 {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 {
		return 0
	}
	return s.sum / float64(s.n)
}

// sampleSpread reads each worker's active tokens; ok is false when a
// worker could not be read or nothing is running.
func sampleSpread(ctx context.Context, client *http.Client, workers []string, blockSize int) (float64, bool) {
	loads := make([]float64, 0, len(workers))
	for _, w := range workers {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, w+"/stats", nil)
		if err != nil {
			return 0, false
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, false
		}
		var ranks []struct{ UsedBlocks int }
		err = json.NewDecoder(resp.Body).Decode(&ranks)
		resp.Body.Close()
		if err != nil {
			return 0, false
		}
		var used int
		for _, r := range ranks {
			used += r.UsedBlocks
		}
		loads = append(loads, float64(used*blockSize))
	}
	return Spread(loads)
}

// Spread is max/mean of loads; ok is false when the mean is 0.
func Spread(loads []float64) (float64, bool) {
	var sum, peak float64
	for _, l := range loads {
		sum += l
		peak = max(peak, l)
	}
	if len(loads) == 0 || sum == 0 {
		return 0, false
	}
	return peak / (sum / float64(len(loads))), true
}
