package cluster

import (
	"fmt"
	"sync"
)

// syncedSet records the peers whose state this replica holds as the
// peers themselves see it: a digest matched, or a full state was applied.
// A replica that just joined is not ready to route until every live peer
// is in it, or its load view would miss the fleet's in-flight requests.
type syncedSet struct {
	mu    sync.Mutex
	names map[string]bool
}

func (s *syncedSet) mark(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.names == nil {
		s.names = map[string]bool{}
	}
	s.names[name] = true
}

func (s *syncedSet) forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.names, name)
}

func (s *syncedSet) has(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.names[name]
}

// PeersSynced is nil once this replica holds every live peer's requests
// (after a matching digest or an applied full state) and, with a
// SessionSink, its session table (a matching session digest or a merged
// table), else says who is missing.
func (n *Node) PeersSynced() error {
	var missing []string
	for _, m := range n.Members() {
		if m.Alive && m.ReplicaID != n.cfg.ReplicaID && (!n.synced.has(m.ReplicaID) || !n.sessions.synced(m.ReplicaID)) {
			missing = append(missing, m.ReplicaID)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("load view of peers %v not synced yet", missing)
	}
	return nil
}
