package httpapi

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/routeapi"
)

// MinTokenLen is the shortest bearer token accepted in a token file: a
// placeholder left in a Secret ("changeme") must stop the router, not
// protect it.
const MinTokenLen = 16

// tokenRecheck is how often a token file's modification time and size are
// looked at (on a request, not by a goroutine).
const tokenRecheck = time.Second

// Tokens is a set of bearer tokens read from a file: one per line (several
// lines let a new token be rolled out before the old one is removed);
// blank lines and lines starting with # are ignored. The file is re-read
// when its modification time or size changes (looked at most once a
// second, on a request), so a rotated Kubernetes Secret takes effect
// without a restart. A re-read that fails or yields no token keeps the
// previous tokens (logged): a half-written file must neither lock every
// client out nor open the door.
type Tokens struct {
	path    string
	log     *slog.Logger
	set     atomic.Pointer[tokenSet]
	checked atomic.Int64 // unix nanos of the last stat
	mu      sync.Mutex   // one re-read at a time
}

type tokenSet struct {
	hashes [][sha256.Size]byte
	mod    time.Time
	size   int64
}

// LoadTokens reads a token file. An unreadable file, a file without
// tokens or a token shorter than MinTokenLen is an error.
func LoadTokens(path string, log *slog.Logger) (*Tokens, error) {
	if log == nil {
		log = slog.Default()
	}
	t := &Tokens{path: path, log: log}
	set, err := readTokens(path)
	if err != nil {
		return nil, err
	}
	t.set.Store(set)
	t.checked.Store(time.Now().UnixNano())
	return t, nil
}

// StaticTokens is a fixed token set (tests, embedding).
func StaticTokens(tokens ...string) *Tokens {
	set := &tokenSet{}
	for _, tok := range tokens {
		set.hashes = append(set.hashes, sha256.Sum256([]byte(tok)))
	}
	t := &Tokens{}
	t.set.Store(set)
	return t
}

func readTokens(path string) (*tokenSet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	set := &tokenSet{mod: st.ModTime(), size: st.Size()}
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		tok := strings.TrimSpace(sc.Text())
		if tok == "" || strings.HasPrefix(tok, "#") {
			continue
		}
		if len(tok) < MinTokenLen {
			return nil, fmt.Errorf("token file %s: the token on line %d has %d characters, want at least %d (generate one with: head -c 32 /dev/urandom | base64)",
				path, line, len(tok), MinTokenLen)
		}
		set.hashes = append(set.hashes, sha256.Sum256([]byte(tok)))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	if len(set.hashes) == 0 {
		return nil, fmt.Errorf("token file %s holds no token", path)
	}
	return set, nil
}

// Valid reports whether presented is one of the tokens. The comparison
// takes the same time whichever token (if any) matches and however much
// of it does: both sides are hashed first (so lengths do not leak either)
// and every token is compared.
func (t *Tokens) Valid(presented string) bool {
	t.maybeReload()
	h := sha256.Sum256([]byte(presented))
	ok := 0
	set := t.set.Load()
	for i := range set.hashes {
		ok |= subtle.ConstantTimeCompare(h[:], set.hashes[i][:])
	}
	return ok == 1
}

func (t *Tokens) maybeReload() {
	if t.path == "" {
		return
	}
	now := time.Now().UnixNano()
	last := t.checked.Load()
	if now-last < int64(tokenRecheck) || !t.checked.CompareAndSwap(last, now) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.set.Load()
	st, err := os.Stat(t.path)
	if err != nil {
		t.log.Error("token file unreadable; keeping the tokens read before", "path", t.path, "err", err)
		return
	}
	if st.ModTime().Equal(cur.mod) && st.Size() == cur.size {
		return
	}
	set, err := readTokens(t.path)
	if err != nil {
		t.log.Error("token file changed but cannot be used; keeping the tokens read before", "err", err)
		// Do not retry this version of the file on every second.
		cp := *cur
		cp.mod, cp.size = st.ModTime(), st.Size()
		t.set.Store(&cp)
		return
	}
	t.set.Store(set)
	t.log.Info("token file re-read", "path", t.path, "tokens", len(set.hashes))
}

// bearer extracts the token of an "Authorization: Bearer <token>" header.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	tok := strings.TrimSpace(h[len(prefix):])
	return tok, tok != ""
}

// unauthorized answers 401 with the WWW-Authenticate challenge of RFC 6750.
func unauthorized(w http.ResponseWriter, realm string, presented bool, msg string) {
	challenge := `Bearer realm="` + realm + `"`
	if presented {
		challenge += `, error="invalid_token"`
	}
	w.Header().Set("WWW-Authenticate", challenge)
	closeAfterReply(w)
	writeError(w, http.StatusUnauthorized, "%s", msg)
}

// adminGate lets an admin request through or answers it (401/403).
// onAdminListener: the request came in on --admin-addr.
func (s *Server) adminGate(w http.ResponseWriter, r *http.Request, onAdminListener bool) bool {
	if t := s.opts.AdminTokens; t != nil {
		tok, presented := bearer(r)
		if presented && t.Valid(tok) {
			return true
		}
		msg := "admin endpoint: missing bearer token (send Authorization: Bearer <a token of --admin-token-file>)"
		if presented {
			msg = "admin endpoint: invalid bearer token"
		}
		unauthorized(w, "kvrouter-admin", presented, msg)
		return false
	}
	if onAdminListener || isLoopback(r.RemoteAddr) {
		return true
	}
	closeAfterReply(w)
	writeError(w, http.StatusForbidden,
		"admin endpoints are served to loopback clients only: start the router with --admin-token-file (bearer token) or --admin-addr (a separate listener) to manage it remotely")
	return false
}

// dataGate checks the client token of a data-plane request when
// --api-token-file is set; an admin token is accepted too.
func (s *Server) dataGate(w http.ResponseWriter, r *http.Request) bool {
	t := s.opts.APITokens
	if t == nil {
		return true
	}
	tok, presented := bearer(r)
	if presented && (t.Valid(tok) || (s.opts.AdminTokens != nil && s.opts.AdminTokens.Valid(tok))) {
		return true
	}
	msg := routeapi.MsgTokenMissing
	if presented {
		msg = routeapi.MsgTokenInvalid
	}
	unauthorized(w, "kvrouter", presented, msg)
	return false
}

func isLoopback(remoteAddr string) bool {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return false
	}
	return ap.Addr().Unmap().IsLoopback()
}

var errEmptyToken = errors.New("empty token")

// ReadTokenForClient reads the first token of a token file, for clients
// (kvbench) that send it.
func ReadTokenForClient(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for _, line := range bytes.Split(raw, []byte("\n")) {
		if tok := strings.TrimSpace(string(line)); tok != "" && !strings.HasPrefix(tok, "#") {
			return tok, nil
		}
	}
	return "", fmt.Errorf("%s: %w", path, errEmptyToken)
}
