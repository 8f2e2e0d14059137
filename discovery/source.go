package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

// Source finds engines. Run reports the full set it sees through emit
// (each call replaces the last) until ctx ends; a look that failed is an
// Update with Err, which keeps the last set.
type Source interface {
	// Name is the source's URI, as configured.
	Name() string
	Run(ctx context.Context, emit func(Update))
}

// Options configure the sources built by Parse.
type Options struct {
	// Interval is how often polling sources (DNS) look again.
	Interval time.Duration
	// Kubeconfig is a kubeconfig file for the Kubernetes sources ("" =
	// in-cluster config, then $KUBECONFIG and ~/.kube/config).
	Kubeconfig string
	Logger     *slog.Logger
	// Kube, when set, gives the Kubernetes sources their clients (tests
	// pass fakes); nil builds them from Kubeconfig.
	Kube *KubeClients
}

// Parse builds a source from a --discover URI:
//
//	dns://NAME[:PORT][?opts]            A/AAAA records of NAME, engines on PORT (8000)
//	dns+srv://NAME[?opts]               SRV records of NAME (targets and ports)
//	k8s://NAMESPACE?selector=SEL[&port=P][&opts]   Ready pods matching the label selector
//	k8s-inferencepool://NAMESPACE/NAME[?api=GROUP/VERSION][&opts]   the pods of an InferencePool
//
// opts: kv-events-port (5557; 0 = none), replay-port (5558; 0 = none),
// dp-size (1), block-size, model, role (prefill, decode or both: the
// engines' pool in a disaggregated fleet; default both); for dns: server=HOST:PORT (a DNS server
// to ask instead of the system's), interval=DURATION. Pods override them
// with annotations (kvrouter.io/kv-events-port, …).
func Parse(uri string, o Options) (Source, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("--discover %q: %w", uri, err)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	q := u.Query()
	d, err := parseDefaults(q, DefaultDefaults())
	if err != nil {
		return nil, fmt.Errorf("--discover %q: %w", uri, err)
	}
	interval := o.Interval
	if v := q.Get("interval"); v != "" {
		if interval, err = time.ParseDuration(v); err != nil || interval <= 0 {
			return nil, fmt.Errorf("--discover %q: interval %q: want a positive duration", uri, v)
		}
	}
	for k := range q {
		if !knownOption[k] {
			return nil, fmt.Errorf("--discover %q: unknown option %q", uri, k)
		}
	}
	switch u.Scheme {
	case "dns", "dns+srv":
		return newDNSSource(uri, u, d, interval, o.Logger)
	case "k8s", "kubernetes":
		return newPodSource(uri, u, d, o)
	case "k8s-inferencepool":
		return newPoolSource(uri, u, d, o)
	}
	return nil, fmt.Errorf("--discover %q: unknown scheme %q (want dns, dns+srv, k8s or k8s-inferencepool)", uri, u.Scheme)
}

var knownOption = map[string]bool{
	"kv-events-port": true, "replay-port": true, "dp-size": true, "block-size": true, "model": true,
	"server": true, "interval": true, "selector": true, "port": true, "api": true, "role": true,
}

// parseDefaults reads the record defaults from URI options (or, with the
// same names, from a pod's annotations).
func parseDefaults(get interface{ Get(string) string }, d Defaults) (Defaults, error) {
	port := func(name string, into *int) error {
		v := get.Get(name)
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("%s %q: want a port number (0 = none)", name, v)
		}
		*into = n
		return nil
	}
	size := func(name string, into *uint32, maxV uint64) error {
		v := get.Get(name)
		if v == "" {
			return nil
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == 0 || n > maxV {
			return fmt.Errorf("%s %q: want an integer in [1, %d]", name, v, maxV)
		}
		*into = uint32(n)
		return nil
	}
	var err error = errors.Join(port("kv-events-port", &d.KVEventsPort), port("replay-port", &d.ReplayPort),
		size("dp-size", &d.DPSize, 1024), size("block-size", &d.BlockSize, 1<<16))
	if m := get.Get("model"); m != "" {
		d.Model = m
	}
	if v := get.Get("role"); v != "" {
		role, rerr := kv.ParseRole(v)
		if rerr != nil {
			err = errors.Join(err, fmt.Errorf("role: %w", rerr))
		} else {
			d.Role = role
		}
	}
	return d, err
}

// ---- errors: counted, logged at most once a minute per source and reason ----

// Stats are the discovery counters.
type Stats struct {
	// Updates: full views received from sources.
	Updates uint64
	// Errors by reason: dns_unreachable, dns_error, forbidden,
	// pool_not_found, api_unavailable, bad_record, kube_error.
	Errors map[string]uint64
	// Registered, Drained, NotReady: transitions applied to the registry.
	Registered, Drained, NotReady uint64
	// Rejected: engines the router refused to register (policy, block
	// size, registry full).
	Rejected uint64
}

type errorLog struct {
	mu     sync.Mutex
	log    *slog.Logger
	counts map[string]uint64
	last   map[string]time.Time // source + reason → last logged
	failed map[string]bool      // sources whose last look failed
}

const errorLogEvery = time.Minute

func newErrorLog(log *slog.Logger) *errorLog {
	return &errorLog{log: log, counts: map[string]uint64{}, last: map[string]time.Time{}, failed: map[string]bool{}}
}

// failed counts a failed look and logs it unless the same source failed
// the same way within the last minute.
func (l *errorLog) fail(source, reason string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts[reason]++
	if reason != "bad_record" {
		l.failed[source] = true
	}
	key := source + "\x00" + reason
	if now := time.Now(); now.Sub(l.last[key]) >= errorLogEvery {
		l.last[key] = now
		msg := "discovery source failed; its last view of the fleet stands"
		if reason == "bad_record" {
			msg = "discovered engine has bad settings; the source's defaults are used"
		}
		l.log.Warn(msg, "source", source, "reason", reason, "err", err)
	}
}

// ok notes a successful look (logged once after failures).
func (l *errorLog) ok(source string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed[source] {
		// bad_record warnings are not failures of the source: their
		// rate limit is kept.
		delete(l.failed, source)
		for k := range l.last {
			if strings.HasPrefix(k, source+"\x00") && !strings.HasSuffix(k, "\x00bad_record") {
				delete(l.last, k)
			}
		}
		l.log.Info("discovery source works again", "source", source)
	}
}

func (l *errorLog) snapshot() map[string]uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]uint64, len(l.counts))
	for k, v := range l.counts {
		out[k] = v
	}
	return out
}

// ReasonError is a source error with the reason it is counted under.
type ReasonError struct {
	Reason string
	Err    error
}

func (e *ReasonError) Error() string { return e.Err.Error() }
func (e *ReasonError) Unwrap() error { return e.Err }

func reasonOf(err error) string {
	var re *ReasonError
	if errors.As(err, &re) {
		return re.Reason
	}
	return "error"
}
