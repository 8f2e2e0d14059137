package mockengine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// KVTransferParams is vLLM's kv_transfer_params (NixlConnector) as the
// mock engine reads it from requests and writes it in responses. A
// prefill request carries {"do_remote_decode": true, ...nulls}; the
// prefill engine answers {"do_remote_prefill": true, "remote_engine_id",
// "remote_block_ids", "remote_host", "remote_port", "remote_request_id",
// "tp_size"}; the decode request carries that answer back.
type KVTransferParams struct {
	DoRemoteDecode  bool     `json:"do_remote_decode"`
	DoRemotePrefill bool     `json:"do_remote_prefill"`
	RemoteEngineID  *string  `json:"remote_engine_id"`
	RemoteBlockIDs  []uint32 `json:"remote_block_ids"`
	RemoteHost      *string  `json:"remote_host"`
	RemotePort      *int     `json:"remote_port"`
	RemoteRequestID string   `json:"remote_request_id,omitempty"`
	TPSize          int      `json:"tp_size,omitempty"`
}

// kvTransferOf reads a body's kv_transfer_params (nil when absent or null).
func kvTransferOf(body []byte) (*KVTransferParams, error) {
	var wrap struct {
		KVTransferParams *KVTransferParams `json:"kv_transfer_params"`
	}
	if !bytes.Contains(body, []byte(`"kv_transfer_params"`)) {
		return nil, nil
	}
	if err := json.Unmarshal(body, &wrap); err != nil {
		return nil, badRequest("kv_transfer_params: %v", err)
	}
	p := wrap.KVTransferParams
	if p != nil && p.DoRemoteDecode && p.DoRemotePrefill {
		return nil, badRequest("kv_transfer_params: do_remote_decode and do_remote_prefill are exclusive")
	}
	if p != nil && p.DoRemotePrefill && (p.RemoteHost == nil || p.RemotePort == nil || p.RemoteRequestID == "") {
		return nil, badRequest("kv_transfer_params: do_remote_prefill needs remote_host, remote_port and remote_request_id")
	}
	return p, nil
}

// kvHolds are a prefill engine's blocks waiting for their decode engine
// to pull them: bounded in number (the oldest hold is dropped when full)
// and in time (vLLM frees unread blocks after
// VLLM_NIXL_ABORT_REQUEST_TIMEOUT), so a decode side that never comes
// cannot pin the cache.
type kvHolds struct {
	mu   sync.Mutex
	byID map[string]kvHold
	max  int
	ttl  time.Duration
	// expired and dropped count holds released unread.
	expired, dropped uint64
}

type kvHold struct {
	release func()
	blocks  int
	expires time.Time
}

func newKVHolds(maxHolds int, ttl time.Duration) *kvHolds {
	return &kvHolds{byID: map[string]kvHold{}, max: maxHolds, ttl: ttl}
}

// add keeps a hold, first releasing the expired ones and, when full, the
// one closest to expiry.
func (h *kvHolds) add(id string, release func(), blocks int, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweepLocked(now)
	for len(h.byID) >= h.max && len(h.byID) > 0 {
		oldest, first := "", time.Time{}
		for k, v := range h.byID {
			if oldest == "" || v.expires.Before(first) {
				oldest, first = k, v.expires
			}
		}
		h.byID[oldest].release()
		delete(h.byID, oldest)
		h.dropped++
	}
	if old, ok := h.byID[id]; ok {
		old.release()
	}
	h.byID[id] = kvHold{release: release, blocks: blocks, expires: now.Add(h.ttl)}
}

func (h *kvHolds) sweepLocked(now time.Time) {
	for k, v := range h.byID {
		if now.After(v.expires) {
			v.release()
			delete(h.byID, k)
			h.expired++
		}
	}
}

// take releases a hold once its blocks were pulled; false if unknown
// (never held, pulled already, expired or dropped).
func (h *kvHolds) take(id string) (blocks int, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.byID[id]
	if !ok {
		return 0, false
	}
	delete(h.byID, id)
	v.release()
	return v.blocks, true
}

// len is the number of holds, after releasing the expired ones.
func (h *kvHolds) len(now time.Time) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweepLocked(now)
	return len(h.byID)
}

func (h *kvHolds) releaseAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, v := range h.byID {
		v.release()
		delete(h.byID, k)
	}
}

// HeldTransfers is how many prefills hold blocks for a decode engine.
func (s *Server) HeldTransfers() int { return s.holds.len(time.Now()) }

// transferOf reads a request's kv_transfer_params and checks them against
// the worker's role and the request's streaming (a prefill hop answers in
// one piece, as vLLM's P/D proxy asks).
func (s *Server) transferOf(body []byte, stream bool) (*KVTransferParams, error) {
	xfer, err := kvTransferOf(body)
	if err == nil {
		err = s.checkRole(xfer)
	}
	if err == nil && xfer != nil && xfer.DoRemoteDecode && stream {
		err = fmt.Errorf("%w: %w", errBadRequest, errTransferStream)
	}
	return xfer, err
}

// checkRole refuses kv_transfer_params the worker's role does not serve:
// a router that sends a remote decode to a decode-only worker is wrong,
// and silently prefilling would hide it.
func (s *Server) checkRole(p *KVTransferParams) error {
	switch {
	case p == nil:
		return nil
	case p.DoRemoteDecode && !s.cfg.Role.Prefills():
		return badRequest("kv_transfer_params do_remote_decode sent to a %s worker", s.cfg.Role)
	case p.DoRemotePrefill && !s.cfg.Role.Decodes():
		return badRequest("kv_transfer_params do_remote_prefill sent to a %s worker", s.cfg.Role)
	}
	return nil
}

// holdForDecode holds a finished prefill's blocks for the decode engine
// and returns the kv_transfer_params of the answer. host is the address
// the caller reached this engine at: the decode engine pulls from there.
func (s *Server) holdForDecode(r *http.Request, stream *Stream, prompt []uint32) (*KVTransferParams, error) {
	ids, release, err := s.engine.HoldPrefix(int(stream.DpRank), prompt)
	if err != nil {
		return nil, err
	}
	host, portStr, err := net.SplitHostPort(r.Host)
	if err != nil {
		release()
		return nil, fmt.Errorf("request host %q: %w", r.Host, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		release()
		return nil, fmt.Errorf("request host %q: port: %w", r.Host, err)
	}
	id := "xfer-" + strconv.FormatUint(uint64(s.cfg.Engine.WorkerID), 10) + "-" + stream.ID
	s.holds.add(id, release, len(ids), time.Now())
	engineID := strconv.FormatUint(uint64(s.cfg.Engine.WorkerID), 10)
	return &KVTransferParams{
		DoRemotePrefill: true, RemoteEngineID: &engineID, RemoteBlockIDs: ids,
		RemoteHost: &host, RemotePort: &port, RemoteRequestID: id, TPSize: 1,
	}, nil
}

// pullFromPrefill is the decode side of a transfer: it charges the
// transfer time of the blocks this rank does not cache, tells the
// prefill engine it has read them (releasing its hold), and puts them in
// its own cache (Stored events). When the pull fails the prompt is
// recomputed here, as vLLM's kv_load_failure_policy "recompute" does.
// It returns the rank the request must run on.
func (s *Server) pullFromPrefill(ctx context.Context, p *KVTransferParams, prompt []uint32, rank int) (int, error) {
	if rank < 0 {
		rank = s.engine.leastLoaded()
	}
	n := len(p.RemoteBlockIDs)
	missing := s.engine.MissingBlocks(rank, prompt, n)
	if d := s.cfg.Engine.realDuration(s.cfg.Engine.TransferTime(missing)); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return rank, ctx.Err()
		}
	}
	if err := s.notifyPulled(ctx, p); err != nil {
		s.log.Warn("KV pull failed; recomputing the prompt", "remote_request_id", p.RemoteRequestID, "err", err)
		s.transferFailures.Add(1)
		return rank, nil
	}
	_, imported, err := s.engine.ImportPrefix(rank, prompt, n)
	if err != nil {
		return rank, err
	}
	s.transferredBlocks.Add(uint64(imported))
	return rank, nil
}

// notifyPulled tells the prefill engine its blocks were read.
func (s *Server) notifyPulled(ctx context.Context, p *KVTransferParams) error {
	body, _ := json.Marshal(map[string]string{"remote_request_id": p.RemoteRequestID})
	url := "http://" + net.JoinHostPort(*p.RemoteHost, strconv.Itoa(*p.RemotePort)) + "/kv_transfer/pulled"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("prefill engine at %s answered %s", url, resp.Status)
	}
	return nil
}

// kvPulled is POST /kv_transfer/pulled {"remote_request_id"}: a decode
// engine read a hold's blocks, which are released.
func (s *Server) kvPulled(w http.ResponseWriter, r *http.Request) {
	var body struct {
		RemoteRequestID string `json:"remote_request_id"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10)).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "kv_transfer/pulled: %v", err)
		return
	}
	blocks, ok := s.holds.take(body.RemoteRequestID)
	if !ok {
		writeError(w, http.StatusNotFound, "no KV blocks held for %q (pulled already, expired or never held)", body.RemoteRequestID)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"released_blocks": blocks})
}

// errTransferStream: the prefill hop is answered whole.
var errTransferStream = errors.New("do_remote_decode requests must not stream (stream: false), as vLLM's P/D proxy sends them")
