package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/internal/loglimit"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/parity"
	"github.com/kvrouter/kvrouter/resume"
	"github.com/kvrouter/kvrouter/routeapi"
	"github.com/kvrouter/kvrouter/sequence"
)

// The proxy is Dynamo's KvPushRouter over HTTP: route, forward to the
// chosen worker with its dp rank, stream back, mark prefill done on the
// first token, grow output blocks, and always free — on completion, on a
// worker error and on client disconnect (the deferred free is the drop
// guard; nothing stays in the load view).

// completionPrompt accepts vLLM's token-id prompt forms: [1,2,3] or
// [[1,2,3]] (one prompt).
func completionPrompt(raw json.RawMessage) ([]uint32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, errors.New("prompt is required")
	}
	if raw[0] == '"' {
		return nil, errNoTokenizer
	}
	var ids TokenIDs
	if err := ids.UnmarshalJSON(raw); err == nil {
		if len(ids) == 0 {
			return nil, errors.New("prompt must not be empty")
		}
		return ids, nil
	}
	var batch []TokenIDs
	if err := json.Unmarshal(raw, &batch); err != nil || len(batch) != 1 || len(batch[0]) == 0 {
		return nil, errors.New("prompt must be a non-empty list of token ids (or a list holding exactly one such list)")
	}
	return batch[0], nil
}

// loopLog limits refuseLoop's log lines (one per 10 s per process).
var loopLog = loglimit.Limiter{Every: 10 * time.Second}

// refuseLoop answers 508 a request another router already forwarded: a
// worker URL leads back to a router, and forwarding again would loop.
func (s *Server) refuseLoop(w http.ResponseWriter, r *http.Request) bool {
	from := r.Header.Get(HopHeader)
	if from == "" {
		return false
	}
	s.outcome("loop")
	// The client is not told which replica forwarded it (the operator's
	// log is); the log line is limited, as the header is the client's.
	if ok, n := loopLog.Allow(time.Now()); ok {
		s.log.Warn("refused a request another router forwarded: a worker URL points at a router", "from_replica", from, "similar_suppressed", n)
	}
	writeError(w, http.StatusLoopDetected,
		"request already forwarded by a kvrouter replica (%s): a worker URL points at a router, not an engine", HopHeader)
	return true
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	s.proxy(w, r, PathChat)
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	s.proxy(w, r, PathCompletions)
}

// proxy serves a completion or chat through the proxy.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, path string) {
	if s.refuseLoop(w, r) {
		return
	}
	body, ok := readBodyOrFail(w, r, s.opts.MaxBodyBytes, nil)
	if !ok {
		return
	}
	p, f := s.prepare(r.Context(), path, r.Header, body)
	if f != nil {
		if f.Outcome != "" {
			s.outcome(f.Outcome)
		}
		f.write(w)
		return
	}
	p.serve(w, r)
}

// prepareCompletion reads a /v1/completions body into the request to
// route.
func (s *Server) prepareCompletion(ctx context.Context, header http.Header, b *openAIBody) (*proxied, *Failure) {
	fields := b.fields
	tokens, lora, err := s.completionTokens(ctx, b)
	if err != nil {
		f := s.inputFailure(err)
		f.Outcome = "bad_input"
		return nil, f
	}
	var maxTokens uint64
	if raw, ok := fields["max_tokens"]; ok {
		if err := json.Unmarshal(raw, &maxTokens); err != nil {
			return nil, failure(http.StatusBadRequest, "max_tokens must be a non-negative integer")
		}
	}
	session, err := s.sessionFromFields(header, fields)
	if err != nil {
		return nil, failure(http.StatusBadRequest, "%v", err)
	}
	p := &proxied{s: s, tokens: tokens, fields: fields, maxTokens: maxTokens, path: PathCompletions, body: b.raw, lora: lora, session: session}
	p.completionParity(b)
	return p, nil
}

// proxied is one completion in flight through the proxy.
type proxied struct {
	s         *Server
	tokens    []uint32
	fields    map[string]json.RawMessage
	maxTokens uint64
	requestID string
	started   time.Time
	// path is the worker endpoint; body the client's body, forwarded
	// unchanged (the dp rank travels in headers) but for a stream's
	// stream_options.include_usage (requestUsage).
	path string
	body []byte
	lora string
	// session is the sticky-session id ("" = none).
	session string
	// modelName is the body's model (the decision's pipeline); explain:
	// the client asked for the route receipt (x-kvrouter-explain).
	modelName string
	explain   bool

	// Parity: the model (nil: none resolved), how the prompt was
	// tokenized, the text input (for a background check), the rank the
	// decision chose and the hit it predicted there, and the engine's
	// usage as read from the answer.
	model         *servedModel
	source        parity.Source
	in            *textInput
	worker        uint64
	rank          uint32
	predicted     int
	hasPrediction bool
	usage         parity.Usage
	gotUsage      bool
	// stripUsage: the proxy asked for the usage chunk the client did not.
	stripUsage bool
	parityDone bool
	// trust is the serving rank's index trust (IndexTrustHeader).
	trust string
	// mig is what the client received and how often the request moved
	// to another worker (migrate.go).
	mig *migration
}

// completionParity fills a completion's parity fields: its model, and
// whether its prompt was text (tokenized by the router or the engine) or
// token ids. The text input is decoded only for a switched model's text
// (its background check needs it).
func (p *proxied) completionParity(b *openAIBody) {
	s := p.s
	if s.parity == nil {
		return
	}
	var name string
	if raw, ok := p.fields["model"]; ok && json.Unmarshal(raw, &name) != nil {
		return
	}
	if m, err := s.opts.Models.resolve(name); err == nil {
		p.model = m
	}
	p.source = parity.SourceTokenIDs
	if _, isText, _ := textPrompt(p.fields["prompt"]); !isText || p.model == nil {
		return
	}
	if p.source = s.paritySource(p.model); p.source == parity.SourceEngine {
		if in, err := b.textInput(); err == nil {
			p.in = in
		}
	}
}

func (p *proxied) serve(w http.ResponseWriter, r *http.Request) {
	s := p.s
	p.started = time.Now()
	p.requestUsage()
	p.mig = newMigration(s.opts.MigrationLimit, p)
	var exclude []uint64
	var last error // the engine failure the request is moving away from
	for {
		resp, workerID, err := p.attempt(r.Context(), exclude)
		var re *routeFailure
		noWorker := errors.As(err, &re) || errors.Is(err, errNoOtherWorker)
		p.mig.moved(s, noWorker)
		if err == nil {
			reason := p.relay(w, r, resp)
			if reason == "" {
				return
			}
			// The engine failed after answering (migrate.go).
			exclude = append(exclude, p.worker)
			last = fmt.Errorf("worker %d failed mid-answer (%s)", p.worker, reason)
			if !p.migrate(w, reason) {
				return
			}
			continue
		}
		if r.Context().Err() != nil {
			s.outcome("client_gone")
			return
		}
		if noWorker && last != nil {
			err = fmt.Errorf("%w; no other worker could take the request: %w", last, err)
		} else if re != nil {
			s.outcome("route_error")
			s.writeRouterError(w, re.err)
			return
		}
		reason := migrateUnreachable
		var df *decodeFailure
		if errors.As(err, &df) {
			reason, workerID = migrateDecodeFailed, df.worker
			s.log.Warn("decode worker failed after the prefill", "worker", df.worker, "err", err)
		} else if !noWorker {
			s.log.Warn("worker unreachable", "worker", workerID, "err", err)
		}
		if !noWorker && p.mig.allow(s, reason) {
			exclude = append(exclude, workerID)
			last = err
			continue
		}
		if reason == migrateDecodeFailed {
			s.outcome("decode_failed")
		} else {
			s.outcome("worker_unreachable")
		}
		if p.mig.headerSent {
			p.endStream(w, err.Error())
			return
		}
		if p.mig.writeFailed(w) {
			return
		}
		writeError(w, http.StatusBadGateway, "no worker could serve the request: %v", err)
		return
	}
}

// migrate decides whether a request whose engine failed after answering
// goes on on another worker, and prepares it; when it does not, it ends
// the client's answer. reason is a migration reason.
func (p *proxied) migrate(w http.ResponseWriter, reason string) bool {
	s := p.s
	m := p.mig
	if m.relayed() {
		if err := p.continuation(); err != nil {
			if errors.Is(err, resume.ErrDone) {
				// Only the end was lost: end the stream here.
				s.outcome("ok")
				_, _ = w.Write([]byte("data: [DONE]\n\n"))
				return false
			}
			m.stream.Refuse(err.Error())
		}
	}
	if !m.allow(s, reason) {
		s.outcome("worker_stream_error")
		s.log.Warn("engine failed; request not moved to another worker", "reason", reason, "migrations", m.used,
			"unsupported", m.stream.Unsupported())
		if m.headerSent {
			p.endStream(w, "migration-limit reached or the request cannot be continued")
		} else if !m.writeFailed(w) {
			writeError(w, http.StatusBadGateway, "the engine failed and the request could not move to another worker")
		}
		return false
	}
	m.held = nil
	s.log.Info("engine failed; request moves to another worker", "reason", reason, "worker", p.worker,
		"generated", m.generated(), "migration", m.used)
	return true
}

type routeFailure struct{ err error }

func (e *routeFailure) Error() string { return e.err.Error() }

// attempt routes and connects to the chosen worker. On a connection
// failure the routed request is freed before returning.
func (p *proxied) attempt(ctx context.Context, exclude []uint64) (*http.Response, uint64, error) {
	s := p.s
	var allowed []uint64
	if len(exclude) > 0 {
		var err error
		if allowed, err = s.workersExcept(ctx, exclude); err != nil {
			return nil, 0, err // no other worker: the caller answers 502
		}
	}
	reply, err := p.route(ctx, allowed, nil)
	if err != nil {
		return nil, 0, &routeFailure{err}
	}
	if reply.PrefillWorker != nil {
		return p.disaggregated(ctx, reply)
	}
	workerID := reply.Worker.GetWorkerId()
	resp, err := p.send(ctx, workerID, reply.Worker.GetDpRank(), p.body)
	if err != nil {
		s.freeQuietly(p.requestID)
		return nil, workerID, err
	}
	return resp, workerID, nil
}

// route asks the scheduler for a recorded decision under a fresh
// request id (allowed, pinned: as RouteRequest's) and keeps what the
// answer's tracking needs.
func (p *proxied) route(ctx context.Context, allowed []uint64, pinned *messages.WorkerRank) (*messages.RouteReply, error) {
	s := p.s
	p.requestID = routeapi.NewRequestID()
	req, err := routeapi.RouteMessage(routeapi.Route{RequestID: p.requestID, Tokens: p.tokens, HasTokens: true,
		ExpectedOutputTokens: p.maxTokens, LoraName: p.lora, SessionID: p.session, AllowedWorkerIDs: allowed, Pinned: pinned,
		Model: p.modelName, Explain: p.explain})
	if err != nil {
		return nil, &actors.RouteError{Kind: actors.ErrBadRequest, Message: err.Error()}
	}
	reply, err := s.opts.Router.Route(ctx, req)
	if err != nil {
		return nil, err
	}
	// The decode half of a disaggregated request gets its prompt's
	// blocks from the prefill worker: its cached tokens are not what the
	// decision predicted, so only its token count is compared.
	p.worker, p.rank = reply.Worker.GetWorkerId(), reply.Worker.GetDpRank()
	p.predicted = int(reply.OverlapBlocks) * s.opts.BlockSize
	p.hasPrediction = reply.PrefillWorker == nil
	p.trust = s.indexTrust(reply.Worker)
	return reply, nil
}

// send posts a body to a worker rank's endpoint.
func (p *proxied) send(ctx context.Context, workerID uint64, rank uint32, body []byte) (*http.Response, error) {
	s := p.s
	base, err := s.workerURL(ctx, workerID)
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, base+p.path, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build forwarded request: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	// vLLM reads the data-parallel rank from X-data-parallel-rank;
	// X-Dp-Rank is this project's older name for it.
	hreq.Header.Set("X-data-parallel-rank", strconv.FormatUint(uint64(rank), 10))
	hreq.Header.Set("X-Dp-Rank", strconv.FormatUint(uint64(rank), 10))
	// Both hops of a disaggregated request carry the same id, as vLLM's
	// proxy sends them.
	hreq.Header.Set("X-Request-Id", p.requestID)
	hreq.Header.Set(HopHeader, s.hopID())
	resp, err := s.opts.Client.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("forward to worker %d at %s: %w", workerID, base, err)
	}
	return resp, nil
}

// relay streams the worker's response to the client through the
// answer's lifecycle guard (answer): whatever happens, the request is
// freed once. On the way it reads the engine's usage (parity), and drops
// the usage chunk the proxy asked for on the client's behalf. It returns
// a migration reason when the engine failed in a way another worker can
// make good (migrate.go), "" when the answer is over.
func (p *proxied) relay(w http.ResponseWriter, r *http.Request, resp *http.Response) string {
	s := p.s
	m := p.mig
	defer resp.Body.Close()
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	a := p.answer(sse)
	defer a.end("stream_cut") // a no-op once the answer ended
	if retryableStatus(resp.StatusCode) && !m.relayed() {
		// Nothing of this answer reached the client yet: another worker
		// may answer instead. The answer is kept for the client in case
		// none can.
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		s.log.Warn("engine answered an error", "worker", p.worker, "status", resp.Status, "body", string(bytes.TrimSpace(msg)))
		m.held = nil
		if m.headerSent || m.used < m.limit {
			m.failed = &failedAnswer{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), body: msg}
			a.end("worker_error")
			return migrateEngineError
		}
		resp.Body = io.NopCloser(bytes.NewReader(msg))
	}
	if !m.headerSent {
		for _, h := range []string{"Content-Type", "Cache-Control"} {
			if v := resp.Header.Get(h); v != "" {
				w.Header().Set(h, v)
			}
		}
		w.Header().Set("X-Request-Id", p.requestID)
		w.Header().Set(IndexTrustHeader, p.trust)
		if p.explain {
			// The receipt is in the ring under the request id (admin:
			// GET /decisions/{request_id}).
			w.Header().Set(DecisionHeader, p.requestID)
		}
		w.WriteHeader(resp.StatusCode)
		m.headerSent = true
		if resp.StatusCode != http.StatusOK {
			if _, err := io.Copy(w, resp.Body); err != nil {
				s.log.Debug("relaying a worker's error answer failed", "request", p.requestID, "status", resp.StatusCode, "err", err)
			}
			s.outcome("worker_error")
			a.end("worker_error")
			return ""
		}
	} else if resp.StatusCode != http.StatusOK || !sse {
		// A continuation must be a stream like the one it continues; an
		// engine that refuses it (4xx) will not take it elsewhere either.
		a.end("worker_error")
		if resp.StatusCode < 500 {
			m.stream.Refuse("the continuation was refused: " + resp.Status)
			return migrateStreamCut
		}
		return migrateEngineError
	}
	flusher, _ := w.(http.Flusher)
	reader := bufio.NewReaderSize(resp.Body, 32<<10)
	// done: the stream's "data: [DONE]" has been relayed, so the client
	// has the whole answer. A client that hangs up after it (OpenAI's
	// SDKs stop reading there and close) or an engine connection that
	// fails after it cuts nothing: the answer is ok and its usage is
	// compared.
	done := false
	for {
		line, err := reader.ReadBytes('\n')
		if sse && err != nil && !isDone(line) {
			// A stream's line cut short by a failed engine is not relayed:
			// the continuation sends it whole (an SSE event ends at its
			// line end; only a last [DONE] may come without one).
			line = nil
		}
		if len(line) > 0 {
			if s.opts.Metrics != nil && !m.ttftSeen {
				m.ttftSeen = true
				s.opts.Metrics.ProxyTTFT.Observe(time.Since(p.started).Seconds())
			}
			if sse {
				line = m.observe(line) // an engine's error event is held back (migrate.go)
			}
			drop := len(line) == 0
			if !drop {
				drop = a.line(line)
			}
			last := !done && len(line) > 0 && sse && isDone(line)
			if last {
				// The request ends here: freed (and its free gossiped)
				// before the client reads the end of the answer.
				a.end("")
			}
			if !drop && !done {
				if _, werr := w.Write(line); werr != nil {
					s.outcome("client_gone")
					a.end("stream_cut")
					return ""
				}
			}
			switch {
			case done || len(line) == 0: // nothing after [DONE] is relayed
			case last:
				done = true
				// Sent now with its blank line (the engine's is not
				// relayed): a client waiting for [DONE] must not wait for
				// the engine's end.
				eol := line[len(bytes.TrimRight(line, "\r\n")):]
				_, _ = w.Write(eol) // a failure is the client gone after [DONE]: nothing is lost
				if flusher != nil {
					flusher.Flush()
				}
			case flusher != nil && (line[0] == '\n' || len(line) == 1):
				flusher.Flush()
			}
		}
		if err == nil {
			continue
		}
		if done || (errors.Is(err, io.EOF) && (!sse || m.stream.Done())) {
			if flusher != nil {
				flusher.Flush()
			}
			s.outcome("ok")
			a.end("")
			return ""
		}
		if r.Context().Err() != nil {
			s.outcome("client_gone")
			a.end("stream_cut")
			return ""
		}
		// Cut: the connection failed, or a stream ended without [DONE].
		a.end("stream_cut")
		if !sse {
			s.outcome("worker_stream_error")
			return "" // part of a unary answer was sent: nothing to continue
		}
		return migrateStreamCut
	}
}

// isDone reports whether an SSE line is the stream's end, "data: [DONE]".
func isDone(line []byte) bool {
	data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:"))
	return ok && string(bytes.TrimSpace(data)) == "[DONE]"
}

// usageReader finds the engine's usage in an answer as it is relayed:
// in a stream, the chunk that carries it (the last one with usage
// wins); in a unary answer, its end (the whole body up to 2 × usageTail,
// else the last usageTail bytes).
type usageReader struct {
	sse, keep bool
	// skipBlank: the event just dropped still has its blank line.
	skipBlank bool
	whole     []byte
	// cut: whole holds only the answer's last bytes.
	cut       bool
	malformed bool
}

// line reads one line of the answer: whether it is a usage-only chunk,
// and whether the client must not see it (the proxy asked for it).
func (u *usageReader) line(p *proxied, line []byte) (usageOnly, drop bool) {
	if !u.keep {
		return false, false
	}
	if !u.sse {
		u.whole = append(u.whole, line...)
		if len(u.whole) > 2*usageTail {
			// Keep the last usageTail bytes: one copy per usageTail
			// bytes relayed.
			u.whole = append(u.whole[:0], u.whole[len(u.whole)-usageTail:]...)
			u.cut = true
		}
		return false, false
	}
	if u.skipBlank {
		u.skipBlank = false
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return false, true
		}
	}
	data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:"))
	if !ok {
		return false, false
	}
	c, err := parity.StreamChunk(bytes.TrimPrefix(data, []byte(" ")))
	if err != nil {
		u.malformed = true
		return false, false
	}
	if c.HasUsage {
		p.usage, p.gotUsage = c.Usage, true
	}
	if c.UsageOnly && p.stripUsage {
		u.skipBlank = true
		return true, true
	}
	return c.UsageOnly, false
}

// finish reads a unary answer's usage; it returns the reason the answer
// cannot be compared ("" when it can).
func (u *usageReader) finish(p *proxied) string {
	if !u.keep {
		return ""
	}
	if !u.sse {
		read := parity.ResponseUsage
		if u.cut {
			read = parity.TailUsage
		}
		usage, ok, err := read(u.whole)
		if err != nil {
			return "malformed"
		}
		p.usage, p.gotUsage = usage, ok
	}
	if !p.gotUsage && u.malformed {
		return "malformed"
	}
	return ""
}

// maybeOutputBlock grows the request by one block every block_size
// generated tokens. The block's weight decays linearly as generation
// approaches max_tokens (the request will free its blocks soon), down to
// a floor once max_tokens is unknown or exceeded.
func (p *proxied) maybeOutputBlock(tokens uint64) {
	s := p.s
	bs := uint64(s.opts.BlockSize)
	if !s.opts.TrackOutputBlocks || bs == 0 || tokens%bs != 0 {
		return
	}
	frac := sequence.DecayFraction(tokens, p.maxTokens) // 1 when max_tokens is unknown
	frac = min(max(frac, s.opts.OutputBlockDecayFloor), 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.opts.Router.AddOutputBlock(ctx, p.requestID, frac); err != nil {
		s.log.Debug("add output block failed", "request", p.requestID, "err", err)
	}
}

func (s *Server) markPrefill(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.opts.Router.MarkPrefillCompleted(ctx, id); err != nil {
		s.log.Debug("mark prefill failed", "request", id, "err", err)
	}
}

// freeQuietly frees with its own context: the client's may be gone.
func (s *Server) freeQuietly(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.opts.Router.Free(ctx, id); err != nil {
		s.log.Debug("free failed", "request", id, "err", err)
	}
}

// freeGossiped frees and waits until the free's gossip left for every
// peer (Router.Gossiped: about a millisecond at most), so the answer's last
// bytes, which the caller sends after it, follow the free: a replica that
// dies once its client has the answer cannot leave the request counted
// on its peers until they notice the death.
func (s *Server) freeGossiped(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.opts.Router.Free(ctx, id); err != nil {
		s.log.Debug("free failed", "request", id, "err", err)
		return
	}
	_ = s.opts.Router.Gossiped(ctx) // a slow peer is counted and logged by the cluster
}

func (s *Server) hopID() string {
	if s.opts.ReplicaID != "" {
		return s.opts.ReplicaID
	}
	return "kvrouter"
}

func (s *Server) outcome(o string) {
	if s.opts.Metrics != nil {
		s.opts.Metrics.ProxyRequests.WithLabelValues(o).Inc()
	}
}

// workerURL returns a worker's base URL from a cached registry copy,
// refreshed at most once a second or on a miss.
func (s *Server) workerURL(ctx context.Context, id uint64) (string, error) {
	s.urlsMu.Lock()
	u, ok := s.urls[id]
	fresh := time.Since(s.urlsRefresh) < time.Second
	s.urlsMu.Unlock()
	if ok && fresh {
		return u, nil
	}
	if err := s.refreshURLs(ctx); err != nil {
		return "", err
	}
	s.urlsMu.Lock()
	defer s.urlsMu.Unlock()
	if u, ok := s.urls[id]; ok && u != "" {
		return u, nil
	}
	return "", fmt.Errorf("worker %d has no URL registered", id)
}

func (s *Server) refreshURLs(ctx context.Context) error {
	reg, err := s.opts.Router.Registry(ctx)
	if err != nil {
		return fmt.Errorf("read worker registry: %w", err)
	}
	urls := make(map[uint64]string, len(reg.Workers))
	addrs := make(map[uint64]string, len(reg.Workers))
	for _, w := range reg.Workers {
		urls[w.Worker.WorkerId] = w.Worker.Url
		if a, err := HostPort(w.Worker.Url); err == nil {
			addrs[w.Worker.WorkerId] = a
		}
	}
	s.urlsMu.Lock()
	s.urls, s.addrs, s.urlsRefresh = urls, addrs, time.Now()
	s.urlsMu.Unlock()
	return nil
}

func (s *Server) forgetURLs() {
	s.urlsMu.Lock()
	s.urlsRefresh = time.Time{}
	s.urlsMu.Unlock()
}

// workersExcept lists registered worker ids minus the excluded ones.
func (s *Server) workersExcept(ctx context.Context, exclude []uint64) ([]uint64, error) {
	reg, err := s.opts.Router.Registry(ctx)
	if err != nil {
		return nil, err
	}
	var out []uint64
	for _, w := range reg.Workers {
		skip := false
		for _, x := range exclude {
			skip = skip || w.Worker.WorkerId == x
		}
		if !skip {
			out = append(out, w.Worker.WorkerId)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: every worker failed", errNoOtherWorker)
	}
	return out, nil
}

var errNoOtherWorker = errors.New("no other worker to retry on")
