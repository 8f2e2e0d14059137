package eppapi

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	procmode "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extproc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// The Gateway API Inference Extension's endpoint picker protocol
// (docs/proposals/004-endpoint-picker-protocol): names and rules.
const (
	// DestinationNamespace is the dynamic-metadata namespace of the
	// picked endpoints (and of the served endpoint the gateway reports).
	DestinationNamespace = "envoy.lb"
	// DestinationKey names the picked endpoints, "ip:port[,ip:port...]",
	// as a request header and as a key of DestinationNamespace.
	DestinationKey = "x-gateway-destination-endpoint"
	// ServedKey is the endpoint that served the request, in the
	// response's metadata context under DestinationNamespace.
	ServedKey = "x-gateway-destination-endpoint-served"
	// SubsetNamespace and SubsetKey carry the gateway's allow-list of
	// endpoints in the request's filter metadata.
	SubsetNamespace = "envoy.lb.subset_hint"
	SubsetKey       = "x-gateway-destination-endpoint-subset"
	// PrefillerKey names the prefill endpoint of a disaggregated
	// decision, as llm-d's P/D routing sidecar on the decode pod reads it.
	PrefillerKey = "x-prefiller-host-port"
	// DPRankHeader is the data-parallel rank the engine serves the
	// request on (vLLM's header, as the proxy sends it).
	DPRankHeader = "x-data-parallel-rank"
	// bodyChunk bounds a body piece sent back to the gateway (Envoy's
	// limit per streamed chunk is 64 KiB; this leaves a margin).
	bodyChunk = 62000
)

// headerValue is a header's value (Envoy fills raw_value; value is the
// older field).
func headerValue(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

// requestHead is what the picker reads from a request's headers.
type requestHead struct {
	method, path string
	header       http.Header
}

// readHead reads the pseudo-headers and the rest of a header map.
func readHead(m *corev3.HeaderMap) requestHead {
	h := requestHead{header: http.Header{}}
	for _, kv := range m.GetHeaders() {
		v := headerValue(kv)
		switch kv.GetKey() {
		case ":method":
			h.method = v
		case ":path":
			h.path, _, _ = strings.Cut(v, "?")
		default:
			h.header.Add(kv.GetKey(), v)
		}
	}
	return h
}

// responseHead is the status and content type of a response's headers.
func responseHead(m *corev3.HeaderMap) (status int, contentType string) {
	status = http.StatusOK
	for _, kv := range m.GetHeaders() {
		switch strings.ToLower(kv.GetKey()) {
		case ":status":
			if n, err := strconv.Atoi(headerValue(kv)); err == nil {
				status = n
			}
		case "content-type":
			contentType = headerValue(kv)
		}
	}
	return status, contentType
}

// subset is the gateway's allow-list (ok false: it sent none, every
// endpoint may be picked).
func subset(md *corev3.Metadata) (addrs []string, ok bool, err error) {
	ns, found := md.GetFilterMetadata()[SubsetNamespace]
	if !found {
		return nil, false, nil
	}
	v, found := ns.GetFields()[SubsetKey]
	if !found {
		return nil, false, nil
	}
	list := v.GetListValue()
	if list == nil {
		return nil, true, fmt.Errorf("%s.%s must be a list of ip:port strings", SubsetNamespace, SubsetKey)
	}
	for _, e := range list.GetValues() {
		s, isString := e.GetKind().(*structpb.Value_StringValue)
		if !isString {
			return nil, true, fmt.Errorf("%s.%s must be a list of ip:port strings", SubsetNamespace, SubsetKey)
		}
		addrs = append(addrs, s.StringValue)
	}
	return addrs, true, nil
}

// served is the endpoint the gateway reports it sent the request to
// ("" when it reports none).
func served(md *corev3.Metadata) string {
	ns := md.GetFilterMetadata()[DestinationNamespace]
	return ns.GetFields()[ServedKey].GetStringValue()
}

// destination is the picked endpoints as the protocol writes them: the
// primary first, then the fallbacks in order.
func destination(primary string, fallbacks []string) string {
	if len(fallbacks) == 0 {
		return primary
	}
	return primary + "," + strings.Join(fallbacks, ",")
}

// destinationMetadata is the dynamic metadata naming the endpoints (the
// same value as the header: the protocol forbids two different ones).
func destinationMetadata(dest string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		DestinationNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			DestinationKey: structpb.NewStringValue(dest),
		}}),
	}}
}

func setHeader(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// pick is a routed request's answer to the gateway: where it goes.
type pick struct {
	dest      string // DestinationKey's value
	rank      uint32
	prefiller string // "" unless disaggregated
	bodyLen   int
}

// mutation is the request-header mutation of a pick.
func (p pick) mutation() *extproc.CommonResponse {
	set := []*corev3.HeaderValueOption{
		setHeader(DestinationKey, p.dest),
		setHeader(DPRankHeader, strconv.FormatUint(uint64(p.rank), 10)),
	}
	if p.prefiller != "" {
		set = append(set, setHeader(PrefillerKey, p.prefiller))
	}
	if p.bodyLen > 0 {
		set = append(set, setHeader("content-length", strconv.Itoa(p.bodyLen)))
	}
	return &extproc.CommonResponse{HeaderMutation: &extproc.HeaderMutation{SetHeaders: set}, ClearRouteCache: true}
}

// headersPick answers a request's headers with the pick (full-duplex
// mode, or a request without a body).
func headersPick(p pick) *extproc.ProcessingResponse {
	return &extproc.ProcessingResponse{
		Response:        &extproc.ProcessingResponse_RequestHeaders{RequestHeaders: &extproc.HeadersResponse{Response: p.mutation()}},
		DynamicMetadata: destinationMetadata(p.dest),
	}
}

// bodyPick answers a buffered request body with the pick: the headers
// are still held, so the body's answer may mutate them.
func bodyPick(p pick) *extproc.ProcessingResponse {
	return &extproc.ProcessingResponse{
		Response:        &extproc.ProcessingResponse_RequestBody{RequestBody: &extproc.BodyResponse{Response: p.mutation()}},
		DynamicMetadata: destinationMetadata(p.dest),
	}
}

// streamedBody returns a body to the gateway in full-duplex mode, in
// pieces of at most bodyChunk bytes (eos on the last), wrapped by wrap
// (request or response body).
func streamedBody(body []byte, eos bool, wrap func(*extproc.BodyResponse) *extproc.ProcessingResponse) []*extproc.ProcessingResponse {
	piece := func(b []byte, last bool) *extproc.ProcessingResponse {
		return wrap(&extproc.BodyResponse{Response: &extproc.CommonResponse{BodyMutation: &extproc.BodyMutation{
			Mutation: &extproc.BodyMutation_StreamedResponse{StreamedResponse: &extproc.StreamedBodyResponse{Body: b, EndOfStream: last}},
		}}})
	}
	if len(body) == 0 {
		return []*extproc.ProcessingResponse{piece(body, eos)}
	}
	var out []*extproc.ProcessingResponse
	for off := 0; off < len(body); off += bodyChunk {
		end := min(off+bodyChunk, len(body))
		out = append(out, piece(body[off:end], eos && end == len(body)))
	}
	return out
}

func requestBody(b *extproc.BodyResponse) *extproc.ProcessingResponse {
	return &extproc.ProcessingResponse{Response: &extproc.ProcessingResponse_RequestBody{RequestBody: b}}
}

func responseBody(b *extproc.BodyResponse) *extproc.ProcessingResponse {
	return &extproc.ProcessingResponse{Response: &extproc.ProcessingResponse_ResponseBody{ResponseBody: b}}
}

// immediate refuses a request with an HTTP status and a JSON body. A
// status Envoy's enum does not define (it validates the field) is sent
// as 500.
func immediate(status int, body []byte, details string) *extproc.ProcessingResponse {
	code := typev3.StatusCode(status)
	if _, defined := typev3.StatusCode_name[int32(status)]; !defined || status < 200 {
		code = typev3.StatusCode_InternalServerError
	}
	return &extproc.ProcessingResponse{Response: &extproc.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extproc.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: code},
		Headers: &extproc.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("content-type", "application/json")}},
		Body:    body,
		Details: details,
	}}}
}

// modes are the body modes the gateway's filter runs in.
type modes struct {
	request, response procmode.ProcessingMode_BodySendMode
}

// modesOf reads the protocol configuration Envoy sends in a stream's
// first message; without it (older Envoy) both bodies are taken to be
// FULL_DUPLEX_STREAMED, the mode the protocol requires pickers to
// support and the Inference Extension's gateways configure.
func modesOf(pc *extproc.ProtocolConfiguration) modes {
	if pc == nil {
		return modes{procmode.ProcessingMode_FULL_DUPLEX_STREAMED, procmode.ProcessingMode_FULL_DUPLEX_STREAMED}
	}
	return modes{pc.GetRequestBodyMode(), pc.GetResponseBodyMode()}
}

// requestModeSupported: the picker must hold the request's headers until
// it has read the body (the decision needs the prompt), which
// FULL_DUPLEX_STREAMED and BUFFERED allow; STREAMED sends the headers on
// before the body, and NONE never shows the body.
func requestModeSupported(m procmode.ProcessingMode_BodySendMode) bool {
	return m == procmode.ProcessingMode_FULL_DUPLEX_STREAMED || m == procmode.ProcessingMode_BUFFERED
}
