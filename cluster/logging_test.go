package cluster

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer is an io.Writer safe for the node's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

// The node logs with a component attribute, not a "cluster: " prefix;
// memberlist's own lines are component=memberlist.
func TestNodeLogsCarryTheComponent(t *testing.T) {
	var buf lockedBuffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	startReplica(t, "logged", nil, func(c *Config) { c.Logger = log })
	recs := buf.records(t)
	started := false
	for _, rec := range recs {
		msg, _ := rec["msg"].(string)
		comp, _ := rec["component"].(string)
		if strings.HasPrefix(msg, "cluster: ") || strings.HasPrefix(msg, "memberlist: ") {
			t.Errorf("message with a prefix: %v", rec)
		}
		if comp != "cluster" && comp != "memberlist" {
			t.Errorf("record without the cluster's component: %v", rec)
		}
		if msg == "node started" {
			started = true
			if comp != "cluster" || rec["replica"] != "logged" {
				t.Errorf("node started: %v", rec)
			}
		}
	}
	if !started {
		t.Fatalf("no \"node started\" record in %d records", len(recs))
	}
}
