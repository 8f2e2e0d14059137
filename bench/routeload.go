package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/natsbus"
)

// RouteLoadConfig describes a load of routing decisions sent to a
// router's HTTP API (POST /route, then POST /free when states are
// updated), and the fleet the harness sets up for it: static workers
// registered over POST /workers, each holding one of Groups system-prompt
// prefixes, published as KV events on NATS so overlap scores are
// non-trivial.
type RouteLoadConfig struct {
	// URL is the router's base URL (http://host:port).
	URL string
	// AdminURL is where the /workers calls go: a router serving its
	// admin API on a separate listener (--admin-addr). Empty = URL.
	AdminURL string
	// Workers registered, with ids WorkerIDBase+1 .. WorkerIDBase+Workers.
	Workers      int
	WorkerIDBase uint64
	// Tokens per prompt; the first PrefixTokens are one of Groups shared
	// system prompts, the rest random. Prompts distinct prompts are sent
	// in turn.
	Tokens, PrefixTokens, Groups, Prompts int
	// BlockSize must be the router's: the harness hashes the prefixes
	// itself for the KV events.
	BlockSize int
	// BusyPerWorker requests of BusyTokens tokens are routed with
	// update_states before the load and kept in flight until Close, so
	// every rank has load to report (no rank can be skipped as idle).
	BusyPerWorker, BusyTokens int
	// UpdateStates: each decision is /route with update_states=true and a
	// /free of the request afterwards; false sends query-only /route.
	UpdateStates bool
	// Timeout bounds each HTTP call.
	Timeout time.Duration
	Seed    uint64
	// NoSetup leaves the target as it is: no registration, no KV events,
	// no busy requests.
	NoSetup bool
	// NATSURL and KVEventsSubject are where the prefixes' KV events are
	// published; without a NATS URL no events are published (every
	// worker then scores zero overlap).
	NATSURL, KVEventsSubject string
	// Cleanup frees the busy requests, clears the prefixes and removes
	// the registered workers at Close (for a router that keeps running).
	Cleanup bool
	// APIToken is sent as a bearer token with /route and /free,
	// AdminToken with the setup calls (/workers); each falls back to the
	// other when empty, for routers that require tokens.
	APIToken, AdminToken string
	// GRPCAddr is the router's gRPC API (host:port), for the gRPC APIs;
	// GRPCConns connections are shared by the senders (default 4).
	GRPCAddr  string
	GRPCConns int
	Logger    *slog.Logger
}

// Validate reports the first unusable setting with the flag-like name of
// the field.
func (c RouteLoadConfig) Validate() error {
	if _, err := ParseTargetURL(c.URL); err != nil {
		return err
	}
	if c.AdminURL != "" {
		if _, err := ParseTargetURL(c.AdminURL); err != nil {
			return fmt.Errorf("admin %w", err)
		}
	}
	switch {
	case c.Tokens < 1:
		return fmt.Errorf("tokens must be at least 1, got %d", c.Tokens)
	case c.BlockSize < 1:
		return fmt.Errorf("block size must be at least 1, got %d", c.BlockSize)
	case c.Prompts < 1:
		return fmt.Errorf("prompts must be at least 1, got %d", c.Prompts)
	case c.Timeout <= 0:
		return fmt.Errorf("request timeout must be positive, got %v", c.Timeout)
	}
	if c.NoSetup {
		return nil
	}
	switch {
	case c.Workers < 1:
		return fmt.Errorf("workers must be at least 1, got %d", c.Workers)
	case c.Groups < 1:
		return fmt.Errorf("groups must be at least 1, got %d", c.Groups)
	case c.PrefixTokens < 0 || c.PrefixTokens > c.Tokens:
		return fmt.Errorf("prefix tokens must be in 0..tokens (%d), got %d", c.Tokens, c.PrefixTokens)
	case c.PrefixTokens > 0 && c.PrefixTokens < c.BlockSize:
		return fmt.Errorf("prefix tokens (%d) must be 0 or at least one block (%d tokens)", c.PrefixTokens, c.BlockSize)
	case c.BusyPerWorker < 0:
		return fmt.Errorf("busy requests per worker must not be negative, got %d", c.BusyPerWorker)
	case c.BusyPerWorker > 0 && c.BusyTokens < 1:
		return fmt.Errorf("busy tokens must be at least 1, got %d", c.BusyTokens)
	}
	return nil
}

// RoutePrompts are the harness's prompts: Groups prefixes, and Prompts
// prompts of Tokens tokens, prompt p starting with prefix p%Groups.
func RoutePrompts(c RouteLoadConfig) (prefixes, prompts [][]uint32) {
	r := newRand(c.Seed, 31)
	prefixes = make([][]uint32, max(c.Groups, 1))
	for g := range prefixes {
		prefixes[g] = randomTokens(make([]uint32, 0, c.PrefixTokens), r, c.PrefixTokens)
	}
	prompts = make([][]uint32, c.Prompts)
	for p := range prompts {
		pr := make([]uint32, 0, c.Tokens)
		pr = append(pr, prefixes[p%len(prefixes)]...)
		prompts[p] = randomTokens(pr, r, c.Tokens-len(pr))
	}
	return prefixes, prompts
}

// PrefixEvents are the KV events that make worker id hold prefix: a
// Cleared (so a rerun against a running router starts alike) and one
// Stored chain of the prefix's full blocks, hashed as the router hashes
// prompts. firstEventID numbers them.
func PrefixEvents(id uint64, prefix []uint32, blockSize int, firstEventID uint64) []kv.Event {
	w := kv.WorkerWithDpRank{WorkerID: kv.WorkerID(id)}
	evs := []kv.Event{{Worker: w, EventID: firstEventID, Kind: kv.EventCleared}}
	local := hashing.BlockHashes(prefix, blockSize, hashing.Options{})
	if len(local) == 0 {
		return evs
	}
	seq := hashing.SequenceHashes(local)
	st := kv.Event{Worker: w, EventID: firstEventID + 1, Kind: kv.EventStored}
	for i := range local {
		st.Blocks = append(st.Blocks, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(seq[i]), TokensHash: local[i]})
	}
	return append(evs, st)
}

// RouteTarget is a router prepared for a route load.
type RouteTarget struct {
	cfg      RouteLoadConfig
	log      *slog.Logger
	client   *http.Client
	prefixes [][]uint32
	prompts  [][]byte // token_ids JSON arrays
	// promptTokens are the same prompts, for the gRPC API.
	promptTokens [][]uint32
	run          string // unique per RouteTarget: request ids never collide across runs
	steps        int
	busy         []string
	ids          []uint64 // workers this harness registered
	eventID      uint64
	firstErr     atomic.Pointer[string]

	// Setup describes what PrepareRouteTarget did, for the report.
	Setup RouteSetup
}

// RouteSetup is what the harness verified before the load.
type RouteSetup struct {
	Registered     int    `json:"registered_workers"`
	EventsSent     bool   `json:"kv_events_published"`
	IndexedBlocks  uint64 `json:"indexed_blocks_per_worker,omitempty"`
	SampleOverlap  uint32 `json:"sample_overlap_blocks"`
	PromptBlocks   int    `json:"prompt_blocks"`
	BusyRequests   int    `json:"busy_requests"`
	RequestBodyLen int    `json:"request_body_bytes"`
}

// PrepareRouteTarget sets the fleet up (unless NoSetup) and checks that a
// query-only /route answers.
func PrepareRouteTarget(ctx context.Context, cfg RouteLoadConfig) (_ *RouteTarget, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	u, _ := ParseTargetURL(cfg.URL)
	cfg.URL = u.String()
	if cfg.AdminURL == "" {
		cfg.AdminURL = cfg.URL
	} else {
		a, _ := ParseTargetURL(cfg.AdminURL)
		cfg.AdminURL = a.String()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	t := &RouteTarget{
		cfg: cfg, log: cfg.Logger, client: &http.Client{Timeout: cfg.Timeout},
		run:     "kvbench-" + strconv.FormatInt(time.Now().UnixNano(), 36),
		eventID: uint64(time.Now().UnixMicro()),
	}
	var prompts [][]uint32
	t.prefixes, prompts = RoutePrompts(cfg)
	t.promptTokens = prompts
	for _, p := range prompts {
		t.prompts = append(t.prompts, appendTokenJSON(nil, p))
	}
	t.Setup.PromptBlocks = cfg.Tokens / cfg.BlockSize
	t.Setup.RequestBodyLen = len(t.routeBody(nil, 0, 0))
	defer func() {
		if err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = t.Close(cctx)
		}
	}()
	if !cfg.NoSetup {
		if err := t.registerWorkers(ctx); err != nil {
			return nil, err
		}
		if cfg.NATSURL != "" && cfg.PrefixTokens >= cfg.BlockSize {
			if err := t.publishPrefixes(ctx); err != nil {
				return nil, err
			}
			t.Setup.EventsSent = true
		}
		if err := t.waitIndexed(ctx); err != nil {
			return nil, err
		}
	}
	overlap, err := t.sampleRoute(ctx)
	if err != nil {
		return nil, err
	}
	t.Setup.SampleOverlap = overlap
	if !cfg.NoSetup {
		if err := t.startBusy(ctx); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// URL is the target's base URL.
func (t *RouteTarget) URL() string { return t.cfg.URL }

func (t *RouteTarget) registerWorkers(ctx context.Context) error {
	for i := range t.cfg.Workers {
		id := t.cfg.WorkerIDBase + uint64(i) + 1
		body := fmt.Sprintf(`{"worker_id":%d,"url":"http://127.0.0.1:9","data_parallel_size":1,"block_size":%d}`, id, t.cfg.BlockSize)
		if _, err := t.call(ctx, http.MethodPost, "/workers", body); err != nil {
			return fmt.Errorf("register worker %d: %w", id, err)
		}
		t.ids = append(t.ids, id)
	}
	t.Setup.Registered = len(t.ids)
	return nil
}

func (t *RouteTarget) publishPrefixes(ctx context.Context) error {
	return t.publish(ctx, func(i int, id uint64) []kv.Event {
		return PrefixEvents(id, t.prefixes[i%len(t.prefixes)], t.cfg.BlockSize, t.nextEventIDs(2))
	})
}

func (t *RouteTarget) nextEventIDs(n uint64) uint64 {
	id := t.eventID
	t.eventID += n
	return id
}

// publish sends each registered worker's events, one message per event
// (the encoding every kvrouter version reads).
func (t *RouteTarget) publish(ctx context.Context, events func(i int, id uint64) []kv.Event) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nc, err := natsbus.Connect(cctx, t.cfg.NATSURL, "kvbench-http", t.log)
	if err != nil {
		return err
	}
	defer nc.Close()
	pub := natsbus.NewPublisher(nc, natsbus.PublisherConfig{EventsSubject: t.cfg.KVEventsSubject})
	for i, id := range t.ids {
		for _, ev := range events(i, id) {
			if err := pub.PublishEvent(&ev); err != nil {
				return err
			}
		}
	}
	if err := nc.FlushWithContext(cctx); err != nil {
		return fmt.Errorf("flush KV events: %w", err)
	}
	return nil
}

// workersView is the part of GET /workers the harness reads.
type workersView struct {
	Workers []struct {
		WorkerID uint64 `json:"worker_id"`
		Ranks    []struct {
			IndexedBlocks uint64 `json:"indexed_blocks"`
		} `json:"ranks"`
	} `json:"workers"`
}

// waitIndexed waits until GET /workers lists every registered worker
// and, when KV events were published, each indexes its prefix.
func (t *RouteTarget) waitIndexed(ctx context.Context) error {
	want := uint64(0)
	if t.Setup.EventsSent {
		want = uint64(t.cfg.PrefixTokens / t.cfg.BlockSize)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		missing, err := t.notIndexed(ctx, want)
		if err == nil && missing == "" {
			t.Setup.IndexedBlocks = want
			return nil
		}
		if err == nil {
			err = errors.New(missing)
		}
		if time.Now().After(deadline) {
			hint := ""
			if want > 0 {
				hint = fmt.Sprintf(" (are --nats-url and --kv-events-subject the router's, and is its block size %d?)", t.cfg.BlockSize)
			}
			return fmt.Errorf("fleet not set up after 15 s: %w%s", err, hint)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (t *RouteTarget) notIndexed(ctx context.Context, want uint64) (string, error) {
	raw, err := t.call(ctx, http.MethodGet, "/workers", "")
	if err != nil {
		return "", err
	}
	var v workersView
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", fmt.Errorf("GET /workers: %w", err)
	}
	indexed := make(map[uint64]uint64, len(v.Workers))
	for _, w := range v.Workers {
		var n uint64
		for _, r := range w.Ranks {
			n += r.IndexedBlocks
		}
		indexed[w.WorkerID] = n
	}
	for _, id := range t.ids {
		n, ok := indexed[id]
		if !ok {
			return fmt.Sprintf("worker %d is not registered", id), nil
		}
		if n < want {
			return fmt.Sprintf("worker %d indexes %d of its %d prefix blocks", id, n, want), nil
		}
	}
	return "", nil
}

// sampleRoute makes one query-only decision for prompt 0 and returns its
// overlap.
func (t *RouteTarget) sampleRoute(ctx context.Context) (uint32, error) {
	body := `{"update_states":false,"token_ids":` + string(t.prompts[0]) + `}`
	raw, err := t.call(ctx, http.MethodPost, "/route", body)
	if err != nil {
		return 0, fmt.Errorf("sample decision: %w", err)
	}
	var res struct {
		WorkerID      *uint64 `json:"worker_id"`
		OverlapBlocks uint32  `json:"overlap_blocks"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || res.WorkerID == nil {
		return 0, fmt.Errorf("sample decision: unexpected answer %.200q", raw)
	}
	return res.OverlapBlocks, nil
}

func (t *RouteTarget) startBusy(ctx context.Context) error {
	r := newRand(t.cfg.Seed, 32)
	for i := range t.cfg.Workers * t.cfg.BusyPerWorker {
		id := t.run + "-busy-" + strconv.Itoa(i)
		toks := appendTokenJSON(nil, randomTokens(nil, r, t.cfg.BusyTokens))
		body := `{"request_id":"` + id + `","update_states":true,"token_ids":` + string(toks) + `}`
		if _, err := t.call(ctx, http.MethodPost, "/route", body); err != nil {
			return fmt.Errorf("busy request %d: %w", i, err)
		}
		t.busy = append(t.busy, id)
	}
	t.Setup.BusyRequests = len(t.busy)
	return nil
}

// Close frees the busy requests and, with Cleanup, clears the prefixes
// and removes the workers it registered.
func (t *RouteTarget) Close(ctx context.Context) error {
	var errs []error
	for _, id := range t.busy {
		if _, err := t.call(ctx, http.MethodPost, "/free", `{"request_id":"`+id+`"}`); err != nil {
			errs = append(errs, fmt.Errorf("free %s: %w", id, err))
			break
		}
	}
	t.busy = nil
	if t.cfg.Cleanup && len(t.ids) > 0 {
		if t.Setup.EventsSent {
			errs = append(errs, t.publish(ctx, func(_ int, id uint64) []kv.Event {
				return []kv.Event{{Worker: kv.WorkerWithDpRank{WorkerID: kv.WorkerID(id)}, EventID: t.nextEventIDs(1), Kind: kv.EventCleared}}
			}))
		}
		for _, id := range t.ids {
			if _, err := t.call(ctx, http.MethodDelete, "/workers/"+strconv.FormatUint(id, 10), ""); err != nil {
				errs = append(errs, fmt.Errorf("remove worker %d: %w", id, err))
				break
			}
		}
		t.ids = nil
	}
	t.client.CloseIdleConnections()
	return errors.Join(errs...)
}

// call makes one setup call (the /workers ones to the admin URL) and
// returns the body of a 200 answer.
func (t *RouteTarget) call(ctx context.Context, method, path, body string) ([]byte, error) {
	var rd io.Reader
	if body != "" {
		rd = bytes.NewReader([]byte(body))
	}
	base := t.cfg.URL
	if strings.HasPrefix(path, "/workers") {
		base = t.cfg.AdminURL
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok := cmp.Or(t.cfg.AdminToken, t.cfg.APIToken); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: status %d: %.300s", method, path, resp.StatusCode, bytes.TrimSpace(raw))
	}
	return raw, nil
}

// routeBody appends prompt p's /route body to dst; with update states it
// carries request id run-step-seq.
func (t *RouteTarget) routeBody(dst []byte, step, seq int) []byte {
	if !t.cfg.UpdateStates {
		dst = append(dst, `{"update_states":false,"token_ids":`...)
	} else {
		dst = append(dst, `{"request_id":"`...)
		dst = t.appendID(dst, step, seq)
		dst = append(dst, `","update_states":true,"token_ids":`...)
	}
	dst = append(dst, t.prompts[seq%len(t.prompts)]...)
	return append(dst, '}')
}

func (t *RouteTarget) appendID(dst []byte, step, seq int) []byte {
	dst = append(dst, t.run...)
	dst = append(dst, "-s"...)
	dst = strconv.AppendInt(dst, int64(step), 10)
	dst = append(dst, '-')
	return strconv.AppendInt(dst, int64(seq), 10)
}

// Run offers the load at cfg's rate over the JSON API and returns the
// measured window.
func (t *RouteTarget) Run(ctx context.Context, cfg OpenLoopConfig) (OpenLoopResult, error) {
	return t.RunAPI(ctx, cfg, APIJSON)
}

// RunAPI offers the load at cfg's rate through api (APIJSON, APIGRPC,
// APIGRPCStream) and returns the measured window.
func (t *RouteTarget) RunAPI(ctx context.Context, cfg OpenLoopConfig, api string) (OpenLoopResult, error) {
	t.steps++
	step := t.steps
	t.firstErr.Store(nil)
	switch api {
	case APIGRPC, APIGRPCStream:
		return t.runGRPC(ctx, cfg, step, api == APIGRPCStream)
	case APIJSON:
	default:
		return OpenLoopResult{}, fmt.Errorf("unknown API %q", api)
	}
	return RunOpenLoop(ctx, cfg, func(int) Sender {
		conn, _ := NewRawHTTPConn(t.cfg.URL, t.cfg.Timeout) // validated in PrepareRouteTarget
		conn.SetBearer(cmp.Or(t.cfg.APIToken, t.cfg.AdminToken))
		return &routeSender{t: t, step: step, conn: conn}
	})
}

// routeSender is one connection's decisions.
type routeSender struct {
	t    *RouteTarget
	step int
	conn *RawHTTPConn
	body []byte
}

func (s *routeSender) Close() { s.conn.Close() }

// Send makes one decision: the route's answer is the latency end point;
// with update states the request is then freed on the same connection
// before the sender takes its next request.
func (s *routeSender) Send(ctx context.Context, seq int) (time.Time, string) {
	s.body = s.t.routeBody(s.body[:0], s.step, seq)
	status, err := s.conn.Post(ctx, "/route", s.body)
	done := time.Now()
	if class := s.t.classify(ctx, "route", status, s.conn.Body, err); class != "" {
		return done, class
	}
	if !bytes.Contains(s.conn.Body, []byte(`"worker_id"`)) {
		s.t.noteFirst(fmt.Sprintf("route: answer without worker_id: %.200s", s.conn.Body))
		return done, "route: answer without worker_id"
	}
	if !s.t.cfg.UpdateStates {
		return done, ""
	}
	s.body = append(s.body[:0], `{"request_id":"`...)
	s.body = s.t.appendID(s.body, s.step, seq)
	s.body = append(s.body, `"}`...)
	status, err = s.conn.Post(ctx, "/free", s.body)
	return done, s.t.classify(ctx, "free", status, s.conn.Body, err)
}

// FirstError is the first failed load call's error text ("" if none).
func (t *RouteTarget) FirstError() string {
	if p := t.firstErr.Load(); p != nil {
		return *p
	}
	return ""
}

// classify names a failed call's outcome ("" = 200) and remembers the
// first failure's text.
func (t *RouteTarget) classify(ctx context.Context, call string, status int, body []byte, err error) string {
	c := classify(ctx, call, status, err)
	switch {
	case c == "":
	case err != nil:
		t.noteFirst(err.Error())
	default:
		t.noteFirst(fmt.Sprintf("%s: status %d: %.200s", call, status, bytes.TrimSpace(body)))
	}
	return c
}

func (t *RouteTarget) noteFirst(msg string) {
	if t.firstErr.Load() == nil {
		t.firstErr.CompareAndSwap(nil, &msg)
	}
}

// classify names a failed call's outcome ("" = 200).
func classify(ctx context.Context, call string, status int, err error) string {
	switch {
	case err != nil && ctx.Err() != nil:
		return ClassCanceled
	case errors.Is(err, ErrHTTPTimeout):
		return ClassTimeout
	case err != nil:
		return call + ": connection error"
	case status != http.StatusOK:
		return call + " " + strconv.Itoa(status)
	}
	return ""
}
