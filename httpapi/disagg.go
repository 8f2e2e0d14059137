package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"

	"github.com/kvrouter/kvrouter/messages"
)

// The disaggregated path of the proxy: vLLM's P/D protocol as its own
// proxy (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py) and
// llm-d's routing sidecar run it. When the router's decision names a
// prefill rank:
//
//  1. the request goes to the prefill worker with kv_transfer_params
//     {"do_remote_decode": true, "do_remote_prefill": false, remote_*:
//     null}, max_tokens (and max_completion_tokens) 1, stream false and
//     no stream_options;
//  2. its answer's kv_transfer_params (do_remote_prefill, remote_engine_id,
//     remote_block_ids, remote_host, remote_port, ...) are copied verbatim
//     into the original request, which goes to the decode worker, whose
//     answer is streamed back.
//
// The prefill hop is freed in the router when its answer arrives (or
// fails); the request itself (the decode) when the stream ends, fails or
// the client leaves. A failed prefill or decode hop moves the request to
// another worker (migrate.go: routed again without the failed worker,
// both hops, since the prompt's blocks wait on the prefill worker for
// that decode), up to --migration-limit times; then it is a 502.

// prefillTransferParams is what vLLM's proxy puts in the prefill request,
// in its order.
var prefillTransferParams = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,` +
	`"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)

// maxPrefillAnswer bounds the prefill worker's answer (one token and the
// transfer parameters: block ids of a long prompt are a few KiB).
const maxPrefillAnswer = 4 << 20

// decodeFailure: the decode worker could not be reached or did not answer
// 200; the request moves to another worker (migrate.go) or gets a 502.
type decodeFailure struct {
	worker uint64
	err    error
}

func (e *decodeFailure) Error() string {
	return fmt.Sprintf("decode worker %d failed after the prefill: %v", e.worker, e.err)
}

func (e *decodeFailure) Unwrap() error { return e.err }

// prefillBody is the client's request as the prefill worker gets it.
func (p *proxied) prefillBody() ([]byte, error) {
	f := maps.Clone(p.fields)
	f["kv_transfer_params"] = prefillTransferParams
	f["stream"] = json.RawMessage("false")
	f["max_tokens"] = json.RawMessage("1")
	if _, ok := f["max_completion_tokens"]; ok {
		f["max_completion_tokens"] = json.RawMessage("1")
	}
	delete(f, "stream_options")
	return json.Marshal(f)
}

// decodeBody is the client's request with the prefill's transfer
// parameters (none: vLLM's proxy then sends the request as it came, and
// the decode worker computes the prompt itself).
func (p *proxied) decodeBody(params json.RawMessage) ([]byte, error) {
	if len(params) == 0 {
		return p.body, nil
	}
	f := maps.Clone(p.fields)
	f["kv_transfer_params"] = params
	return json.Marshal(f)
}

// disaggregated runs both hops of a routed request. On a prefill failure
// it returns the prefill worker's id (the retry excludes it); the
// request is freed (with its prefill hop) before any error return.
func (p *proxied) disaggregated(ctx context.Context, reply *messages.RouteReply) (*http.Response, uint64, error) {
	s := p.s
	pw := reply.PrefillWorker
	params, err := p.prefill(ctx, pw, reply.PrefillRequestId)
	if err != nil {
		s.freeQuietly(p.requestID)
		return nil, pw.WorkerId, fmt.Errorf("prefill on worker %d: %w", pw.WorkerId, err)
	}
	body, err := p.decodeBody(params)
	if err != nil {
		s.freeQuietly(p.requestID)
		return nil, 0, &decodeFailure{reply.Worker.GetWorkerId(), err}
	}
	decode := reply.Worker.GetWorkerId()
	resp, err := p.send(ctx, decode, reply.Worker.GetDpRank(), body)
	if err != nil {
		s.freeQuietly(p.requestID)
		return nil, 0, &decodeFailure{decode, err}
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		s.freeQuietly(p.requestID)
		return nil, 0, &decodeFailure{decode, fmt.Errorf("answered %s: %s", resp.Status, bytes.TrimSpace(msg))}
	}
	return resp, decode, nil
}

// prefill sends the prefill hop and returns the kv_transfer_params of
// its answer (nil when it has none). The hop is freed in the router as
// soon as the answer (or the failure) is in.
func (p *proxied) prefill(ctx context.Context, w *messages.WorkerRank, hopID string) (json.RawMessage, error) {
	defer p.s.freeQuietly(hopID)
	body, err := p.prefillBody()
	if err != nil {
		return nil, fmt.Errorf("build prefill request: %w", err)
	}
	resp, err := p.send(ctx, w.WorkerId, w.DpRank, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxPrefillAnswer+1))
	if err != nil {
		return nil, fmt.Errorf("read prefill answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("answered %s: %s", resp.Status, bytes.TrimSpace(answer[:min(len(answer), 4<<10)]))
	}
	if len(answer) > maxPrefillAnswer {
		return nil, fmt.Errorf("prefill answer larger than %d bytes", maxPrefillAnswer)
	}
	return transferParamsOf(answer)
}

// transferParamsOf reads the kv_transfer_params of a prefill answer: an
// object, kept verbatim, or nil when absent or null.
func transferParamsOf(answer []byte) (json.RawMessage, error) {
	var out struct {
		KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(answer, &out); err != nil {
		return nil, fmt.Errorf("prefill answer is not JSON: %w", err)
	}
	params := bytes.TrimSpace(out.KVTransferParams)
	if len(params) == 0 || bytes.Equal(params, []byte("null")) {
		return nil, nil
	}
	if params[0] != '{' {
		return nil, errors.New("prefill answer's kv_transfer_params is not an object")
	}
	return params, nil
}
