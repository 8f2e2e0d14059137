package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// SessionBinding is the answer to GET /sessions/{id}.
type SessionBinding struct {
	SessionID string `json:"session_id"`
	WorkerID  uint64 `json:"worker_id"`
	DpRank    uint32 `json:"dp_rank"`
	// LastUsed is the session's last use (RFC 3339); it ends session-ttl
	// after it.
	LastUsed time.Time `json:"last_used"`
}

// SessionEnded is the answer to DELETE /sessions/{id}.
type SessionEnded struct {
	SessionID string `json:"session_id"`
	Ended     bool   `json:"ended"`
}

// sessionID is a request's sticky-session id: the session header when
// the client sent one, else the body's session field (top level; a JSON
// string, null or absent). "" means no session. The table's own rules
// (length, characters) are applied by the scheduler, which answers 400.
func (s *Server) sessionID(header http.Header, body []byte) (string, error) {
	if h := s.opts.SessionHeader; h != "" {
		if vs := header.Values(h); len(vs) > 0 {
			if len(vs) > 1 {
				return "", fmt.Errorf("header %s is sent %d times; send it once", h, len(vs))
			}
			if vs[0] == "" {
				return "", fmt.Errorf("header %s is empty", h)
			}
			return vs[0], nil
		}
	}
	field := s.opts.SessionBodyField
	if field == "" || body == nil {
		return "", nil
	}
	// Most requests carry no session: a byte search skips the scan.
	if !bytes.Contains(body, []byte(`"`+field+`"`)) {
		return "", nil
	}
	start, end, ok := findTopLevelValue(body, field)
	if !ok {
		return "", nil
	}
	raw := body[start:end]
	if string(raw) == "null" {
		return "", nil
	}
	var id string
	if err := json.Unmarshal(raw, &id); err != nil {
		return "", fmt.Errorf("%s must be a string", field)
	}
	if id == "" {
		return "", fmt.Errorf("%s is empty", field)
	}
	return id, nil
}

// sessionFromFields is sessionID for a body already split into fields.
func (s *Server) sessionFromFields(header http.Header, fields map[string]json.RawMessage) (string, error) {
	if id, err := s.sessionID(header, nil); err != nil || id != "" {
		return id, err
	}
	field := s.opts.SessionBodyField
	raw, ok := fields[field]
	if field == "" || !ok || !present(raw) {
		return "", nil
	}
	var id string
	if err := json.Unmarshal(raw, &id); err != nil {
		return "", fmt.Errorf("%s must be a string", field)
	}
	if id == "" {
		return "", fmt.Errorf("%s is empty", field)
	}
	return id, nil
}

// endSession is DELETE /sessions/{id}: the session ends on every replica
// (the end is gossiped); its next request is routed afresh.
func (s *Server) endSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	found, err := s.opts.Router.EndSession(r.Context(), id)
	if err != nil {
		s.writeRouterError(w, err)
		return
	}
	if !found {
		writeError(w, http.StatusNotFound, "session %q is not active", id)
		return
	}
	writeJSON(w, http.StatusOK, SessionEnded{SessionID: id, Ended: true})
}

// getSession is GET /sessions/{id}: where the session's next request
// goes (while that rank stays fit), as this replica's table says.
func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	b, err := s.opts.Router.Session(r.Context(), id)
	if err != nil {
		s.writeRouterError(w, err)
		return
	}
	if b == nil {
		writeError(w, http.StatusNotFound, "session %q is not active", id)
		return
	}
	writeJSON(w, http.StatusOK, SessionBinding{SessionID: id, WorkerID: b.Worker.GetWorkerId(), DpRank: b.Worker.GetDpRank(),
		LastUsed: time.Unix(0, b.LastUsedUnixNano).UTC()})
}
