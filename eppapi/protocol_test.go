package eppapi

import (
	"bytes"
	"net/http"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	procmode "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extproc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

func subsetMeta(v *structpb.Value) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		SubsetNamespace: {Fields: map[string]*structpb.Value{SubsetKey: v}},
	}}
}

func TestSubset(t *testing.T) {
	list := func(vals ...*structpb.Value) *structpb.Value {
		return structpb.NewListValue(&structpb.ListValue{Values: vals})
	}
	for _, tt := range []struct {
		name    string
		md      *corev3.Metadata
		want    []string
		ok, err bool
	}{
		{"no metadata", nil, nil, false, false},
		{"other namespace", &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.lb": {}}}, nil, false, false},
		{"two endpoints", subsetMeta(list(structpb.NewStringValue("10.0.0.1:8000"), structpb.NewStringValue("10.0.0.2:8000"))),
			[]string{"10.0.0.1:8000", "10.0.0.2:8000"}, true, false},
		{"empty list", subsetMeta(list()), nil, true, false},
		{"not a list", subsetMeta(structpb.NewStringValue("10.0.0.1:8000")), nil, true, true},
		{"a number in the list", subsetMeta(list(structpb.NewNumberValue(1))), nil, true, true},
	} {
		got, ok, err := subset(tt.md)
		if ok != tt.ok || (err != nil) != tt.err || len(got) != len(tt.want) {
			t.Errorf("%s: %v %v %v", tt.name, got, ok, err)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
			}
		}
	}
}

func TestPickAnswers(t *testing.T) {
	p := pick{dest: destination("10.0.0.1:8000", []string{"10.0.0.2:8000", "10.0.0.3:8000"}), rank: 3, prefiller: "10.0.0.9:8000", bodyLen: 120}
	r := headersPick(p)
	h := map[string]string{}
	for _, o := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		h[o.GetHeader().GetKey()] = string(o.GetHeader().GetRawValue())
	}
	want := map[string]string{DestinationKey: "10.0.0.1:8000,10.0.0.2:8000,10.0.0.3:8000", DPRankHeader: "3",
		PrefillerKey: "10.0.0.9:8000", "content-length": "120"}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("header %s = %q, want %q", k, h[k], v)
		}
	}
	md := r.GetDynamicMetadata().GetFields()[DestinationNamespace].GetStructValue().GetFields()[DestinationKey].GetStringValue()
	if md != want[DestinationKey] {
		t.Errorf("metadata %q, header %q: the protocol wants one value", md, want[DestinationKey])
	}
	if !r.GetRequestHeaders().GetResponse().GetClearRouteCache() {
		t.Error("the pick must clear the route cache")
	}
	b := bodyPick(pick{dest: "10.0.0.1:8000"})
	if b.GetRequestBody().GetResponse().GetHeaderMutation() == nil || b.GetDynamicMetadata() == nil {
		t.Errorf("buffered pick: %v", b)
	}
}

func TestStreamedBody(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 2*bodyChunk+5)
	for _, tt := range []struct {
		body   []byte
		eos    bool
		pieces int
	}{
		{body, true, 3}, {body, false, 3}, {body[:bodyChunk], true, 1}, {nil, true, 1},
	} {
		out := streamedBody(tt.body, tt.eos, requestBody)
		if len(out) != tt.pieces {
			t.Fatalf("%d bytes: %d pieces, want %d", len(tt.body), len(out), tt.pieces)
		}
		var got []byte
		for i, r := range out {
			sb := r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
			if len(sb.GetBody()) > bodyChunk {
				t.Errorf("piece %d of %d bytes", i, len(sb.GetBody()))
			}
			if sb.GetEndOfStream() != (tt.eos && i == len(out)-1) {
				t.Errorf("piece %d: end_of_stream %v", i, sb.GetEndOfStream())
			}
			got = append(got, sb.GetBody()...)
		}
		if !bytes.Equal(got, tt.body) {
			t.Errorf("%d bytes came back as %d", len(tt.body), len(got))
		}
	}
}

func TestImmediate(t *testing.T) {
	for _, tt := range []struct {
		status int
		want   typev3.StatusCode
	}{
		{400, typev3.StatusCode_BadRequest}, {404, typev3.StatusCode_NotFound}, {413, typev3.StatusCode_PayloadTooLarge},
		{429, typev3.StatusCode_TooManyRequests}, {503, typev3.StatusCode_ServiceUnavailable},
		{504, typev3.StatusCode_GatewayTimeout},
		{499, typev3.StatusCode_InternalServerError}, // not in Envoy's enum, which Envoy validates
		{0, typev3.StatusCode_InternalServerError},
	} {
		r := immediate(tt.status, []byte(`{"error":"x"}`), "test").GetImmediateResponse()
		if r.GetStatus().GetCode() != tt.want || string(r.GetBody()) != `{"error":"x"}` {
			t.Errorf("%d: %v", tt.status, r)
		}
	}
}

func TestModes(t *testing.T) {
	if m := modesOf(nil); m.request != procmode.ProcessingMode_FULL_DUPLEX_STREAMED || m.response != procmode.ProcessingMode_FULL_DUPLEX_STREAMED {
		t.Errorf("without protocol_config: %v", m)
	}
	m := modesOf(&extproc.ProtocolConfiguration{RequestBodyMode: procmode.ProcessingMode_BUFFERED, ResponseBodyMode: procmode.ProcessingMode_NONE})
	if m.request != procmode.ProcessingMode_BUFFERED || m.response != procmode.ProcessingMode_NONE {
		t.Errorf("buffered/none: %v", m)
	}
	for mode, ok := range map[procmode.ProcessingMode_BodySendMode]bool{
		procmode.ProcessingMode_FULL_DUPLEX_STREAMED: true, procmode.ProcessingMode_BUFFERED: true,
		procmode.ProcessingMode_STREAMED: false, procmode.ProcessingMode_NONE: false, procmode.ProcessingMode_BUFFERED_PARTIAL: false,
	} {
		if requestModeSupported(mode) != ok {
			t.Errorf("%s supported: %v", mode, !ok)
		}
	}
}

func TestHeads(t *testing.T) {
	h := readHead(&corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/completions?x=1")},
		{Key: "x-session-id", Value: "s1"},
	}})
	if h.method != "POST" || h.path != "/v1/completions" || h.header.Get("X-Session-Id") != "s1" {
		t.Errorf("request head: %+v", h)
	}
	code, ct := responseHead(&corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":status", RawValue: []byte("503")}, {Key: "content-type", RawValue: []byte("text/event-stream")},
	}})
	if code != http.StatusServiceUnavailable || ct != "text/event-stream" {
		t.Errorf("response head: %d %q", code, ct)
	}
	served := served(&corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		DestinationNamespace: {Fields: map[string]*structpb.Value{ServedKey: structpb.NewStringValue("10.0.0.2:8000")}},
	}})
	if served != "10.0.0.2:8000" {
		t.Errorf("served %q", served)
	}
}
