package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"time"

	metrics "github.com/hashicorp/go-metrics"
)

// What memberlist's failure detector did, counted exactly where memberlist
// decides it:
//
//   - suspicions: memberlist emits the go-metrics counter
//     memberlist.msg.suspect once each time this node moves a live peer to
//     suspect (its own failed probe or a peer's suspect message; further
//     confirmations of the same suspicion are not counted);
//   - deaths: memberlist.msg.dead, once each time this node moves a member
//     to dead or left (a graceful leave counts too, its own included);
//   - degraded probes: memberlist.degraded.probe, a probe this node ran
//     with its interval stretched by Lifeguard's local-health awareness
//     (it missed acks or nacks it expected: a sign of its own starvation);
//   - refutations: memberlist has no metric for them, but each refute is
//     followed by exactly one "Refuting a ..." log line, which our
//     logger bridge sees (logging.go);
//   - false deaths: a peer declared dead or left that came back with the
//     boot key it had (members.go) was alive all along, or behind a
//     partition: a restarted process has a new boot key.
//
// go-metrics is process-global, so one sink serves every Node of the
// process and tells them apart by a per-Node label memberlist stamps on
// each of its metrics (Config.MetricLabels).

// detectorLabel is the label carrying a Node's sink token.
const detectorLabel = "kvrouter_node"

// detectorSink receives memberlist's go-metrics and counts the failure
// detector's events for the Node whose token the label names.
type detectorSink struct {
	nodes sync.Map // token string -> *counters
}

var (
	theDetectorSink     = &detectorSink{}
	installDetectorSink sync.Once
)

// registerDetector routes memberlist's metrics labelled with the returned
// labels to c, installing the process-wide sink on first use. (It replaces
// any go-metrics global set before: nothing else in kvrouter uses
// go-metrics.)
func registerDetector(c *counters) (labels []metrics.Label, unregister func()) {
	installDetectorSink.Do(func() {
		conf := metrics.DefaultConfig("")
		conf.EnableHostname = false
		conf.EnableRuntimeMetrics = false
		conf.TimerGranularity = time.Millisecond
		// No prefix filter: the sink's switch is cheaper than the filter's
		// per-call key join.
		conf.FilterDefault = true
		_, _ = metrics.NewGlobal(conf, theDetectorSink) // New never fails
	})
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	token := hex.EncodeToString(b[:])
	theDetectorSink.nodes.Store(token, c)
	return []metrics.Label{{Name: detectorLabel, Value: token}}, func() { theDetectorSink.nodes.Delete(token) }
}

func (s *detectorSink) counters(labels []metrics.Label) *counters {
	for _, l := range labels {
		if l.Name == detectorLabel {
			if c, ok := s.nodes.Load(l.Value); ok {
				return c.(*counters)
			}
			return nil
		}
	}
	return nil
}

func (s *detectorSink) IncrCounterWithLabels(key []string, val float32, labels []metrics.Label) {
	if len(key) != 3 || key[0] != "memberlist" {
		return
	}
	var counter func(*counters)
	switch key[1] + "." + key[2] {
	case "msg.suspect":
		counter = func(c *counters) { c.suspicions.Add(1) }
	case "msg.dead":
		counter = func(c *counters) { c.deaths.Add(1) }
	case "degraded.probe":
		counter = func(c *counters) { c.degradedProbes.Add(1) }
	default:
		return
	}
	if c := s.counters(labels); c != nil {
		counter(c)
	}
}

func (s *detectorSink) SetGaugeWithLabels(key []string, val float32, labels []metrics.Label) {
	if len(key) == 3 && key[0] == "memberlist" && key[1] == "health" && key[2] == "score" {
		if c := s.counters(labels); c != nil {
			c.healthScore.Store(int64(val))
		}
	}
}

func (s *detectorSink) SetGauge([]string, float32)                             {}
func (s *detectorSink) EmitKey([]string, float32)                              {}
func (s *detectorSink) IncrCounter([]string, float32)                          {}
func (s *detectorSink) AddSample([]string, float32)                            {}
func (s *detectorSink) AddSampleWithLabels([]string, float32, []metrics.Label) {}

// isRefutation reports whether a memberlist log message (prefix and level
// removed) is the one logged after each refute: "Refuting a suspect
// message", "Refuting a dead message" or "Refuting an alive message".
func isRefutation(msg string) bool {
	return strings.HasPrefix(msg, "Refuting a")
}
