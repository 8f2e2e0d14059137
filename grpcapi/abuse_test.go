package grpcapi_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/kvrouter/kvrouter/connguard"
	"github.com/kvrouter/kvrouter/grpcapi"
	"github.com/kvrouter/kvrouter/httpapi"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kvclient"
	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
	"github.com/kvrouter/kvrouter/metrics"
)

// countingListener counts the bytes the server reads from its clients.
type countingListener struct {
	net.Listener
	read atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, read: &l.read}, nil
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

// guardedServer serves e's router on a guarded, byte-counting loopback
// listener with the client token apiToken and an 8 MiB message limit.
func guardedServer(t *testing.T, e *env) (addr string, read *atomic.Int64, gl *connguard.Listener, m *metrics.Router) {
	t.Helper()
	m = metrics.New()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: raw}
	gl = connguard.Wrap(cl, connguard.Config{Name: "grpc", MaxConns: 64, MaxPerClient: 16, ArmOnAccept: true,
		UnauthIdle: time.Minute, Log: slog.New(slog.DiscardHandler),
		OnRefuse: func(reason string) { m.ConnRefused("grpc", reason) }})
	gs := grpcapi.New(grpcapi.Options{Router: e.router, Metrics: m, BlockSize: 16, MaxRecvBytes: 8 << 20,
		APITokens: httpapi.StaticTokens(apiToken), Log: slog.New(slog.DiscardHandler)})
	go func() { _ = gs.Serve(gl) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gs.Stop(ctx)
	})
	return gl.Addr().String(), &cl.read, gl, m
}

// A call without a valid token is refused when its headers arrive: the
// server reads at most a flow-control window of its 6 MB message, never
// decodes it, and drops the connection. With the token the same message
// is read whole (the count can tell the difference).
func TestUnauthenticatedCallReadsNoMessage(t *testing.T) {
	e := newEnv(t, envOptions{workers: 1})
	addr, read, gl, m := guardedServer(t, e)
	ids := make([]uint32, 2<<20) // 3 bytes each: a 6 MiB message
	for i := range ids {
		ids[i] = 1<<20 + uint32(i%1000)
	}
	big := &pb.RouteRequest{TokenIds: ids, UpdateStates: new(false)}
	if n := proto.Size(big); n < 6<<20 {
		t.Fatalf("message is %d bytes, want 6 MiB", n)
	}
	ctx := context.Background()
	const calls = 5
	start := read.Load()
	for i := range calls {
		c, err := kvclient.Dial(addr, kvclient.Options{Token: map[bool]string{true: "wrong-token-0123456789abcdef"}[i%2 == 1]})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Route(ctx, big)
		if st := status.Convert(err); st.Code() != codes.Unauthenticated {
			t.Fatalf("call %d: %v, want Unauthenticated", i, err)
		}
		// The server drops the connection after the refusal.
		testutil.Eventually(t, 5*time.Second, "the refused client's connection closed", func() bool { return gl.Clients() == 0 })
		_ = c.Close()
	}
	unauth := read.Load() - start
	t.Logf("%d unauthenticated 6 MiB calls: the server read %d bytes (%.1f KiB per call)", calls, unauth, float64(unauth)/calls/1024)
	if unauth > calls*(1<<20) {
		t.Fatalf("the server read %d bytes of %d unauthenticated 6 MiB calls; want at most 1 MiB per call", unauth, calls)
	}
	if got := promtest.ToFloat64(m.GRPCRequests.WithLabelValues("Route", "Unauthenticated")); got != calls {
		t.Errorf("grpc_requests_total{Route,Unauthenticated} = %v, want %d", got, calls)
	}
	if got := promtest.ToFloat64(m.ConnRefusedCounter("grpc", connguard.ReasonAuthFailed)); got != calls {
		t.Errorf("conns_refused_total{grpc,auth_failed} = %v, want %d", got, calls)
	}

	good, err := kvclient.Dial(addr, kvclient.Options{Token: apiToken})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	start = read.Load()
	_, err = good.Route(ctx, big)
	if status.Code(err) == codes.Unauthenticated {
		t.Fatalf("authenticated call: %v", err)
	}
	if n := read.Load() - start; n < 6<<20 {
		t.Fatalf("an authenticated 6 MiB call read %d bytes: the counter does not count", n)
	}
}

// rawCodec sends and receives bytes as they are.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*(v.(*[]byte)) = data.Materialize()
	return nil
}

// Bytes that do not decode, token ids above 2^32-1 and request ids the
// JSON API refuses are INVALID_ARGUMENT, on unary calls and on the
// Lifecycle stream.
func TestBadMessagesAreInvalidArgument(t *testing.T) {
	e := newEnv(t, envOptions{workers: 1})
	ctx := context.Background()
	conn := e.client.Conn()
	route := func(id string, extra ...[]byte) []byte {
		b := protowire.AppendTag(nil, 1, protowire.BytesType)
		b = protowire.AppendString(b, id)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, []byte{1, 2, 3})
		for _, x := range extra {
			b = append(b, x...)
		}
		return b
	}
	wide := protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 1<<40+5)
	widePacked := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), protowire.AppendVarint([]byte{7}, 1<<32))
	ref := func(id string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), id)
	}
	for _, tc := range []struct {
		name, method string
		msg          []byte
		want         string
	}{
		{"truncated varint", "Route", []byte{0x12, 0x02, 0x80, 0x80}, "invalid message"},
		{"bad wire type", "Route", []byte{0x0f}, "invalid message"},
		{"token id 2^40+5 unpacked", "Route", route("", wide), "does not fit in uint32"},
		{"token id 2^32 packed", "Route", route("", widePacked), "does not fit in uint32"},
		{"tokens token id 2^32", "OverlapScores", protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), protowire.AppendVarint(nil, 1<<32)), "does not fit in uint32"},
		{"request id not UTF-8", "Route", route("a\xffb"), "invalid message"},
		{"request id with RLO", "Route", route("evil\u202etxt"), "bidirectional control"},
		{"request id with NUL", "Route", route("a\x00b"), "control character"},
		{"free id with NUL", "Free", ref("a\x00b"), "control character"},
		{"free id with LRI", "Free", ref("a\u2066b"), "bidirectional control"},
		{"free id not UTF-8", "PrefillDone", ref("\xc0"), "invalid message"},
	} {
		var out []byte
		err := conn.Invoke(ctx, "/kvrouter.v1.Router/"+tc.method, tc.msg, &out, grpc.ForceCodecV2(rawCodec{}))
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.want) {
			t.Errorf("%s: %v %q, want InvalidArgument %q", tc.name, st.Code(), st.Message(), tc.want)
		}
	}

	lifecycle := func(id uint64, call []byte) []byte {
		b := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), id)
		return protowire.AppendBytes(protowire.AppendTag(b, 2, protowire.BytesType), call)
	}
	for _, tc := range []struct {
		name string
		msg  []byte
		want string
	}{
		{"malformed", []byte{0x12, 0x05, 0x01}, "invalid message"},
		{"wide token id", lifecycle(1, route("", wide)), "does not fit in uint32"},
		// A route sent twice merges: protobuf-go decodes that shape.
		{"wide token id, merged shape", append(lifecycle(1, route("")), lifecycle(1, route("", widePacked))...), "does not fit in uint32"},
	} {
		s, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true},
			"/kvrouter.v1.Router/Lifecycle", grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SendMsg(tc.msg); err != nil {
			t.Fatal(err)
		}
		var out []byte
		err = s.RecvMsg(&out)
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.want) {
			t.Errorf("stream %s: %v %q, want InvalidArgument %q", tc.name, st.Code(), st.Message(), tc.want)
		}
	}
}

// A connection that already carried authenticated calls may be shared by
// a gateway's clients: a call with a bad token on it is refused alone and
// the connection stays.
func TestAuthFailureKeepsAuthenticatedConnection(t *testing.T) {
	e := newEnv(t, envOptions{workers: 1})
	addr, _, gl, m := guardedServer(t, e)
	c, err := kvclient.Dial(addr, kvclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	with := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
	}
	route := &pb.RouteRequest{TokenIds: []uint32{1}, UpdateStates: new(false)}
	if _, err := c.Route(with(apiToken), route); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Route(with("wrong-token-0123456789abcdef"), route); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("bad token: %v", err)
	}
	time.Sleep(2 * connguard.AuthFailGrace)
	if gl.Clients() != 1 {
		t.Fatalf("%d client connections, want the shared one kept", gl.Clients())
	}
	if _, err := c.Route(with(apiToken), route); err != nil {
		t.Fatalf("after a refused call: %v", err)
	}
	if got := promtest.ToFloat64(m.ConnRefusedCounter("grpc", connguard.ReasonAuthFailed)); got != 1 {
		t.Errorf("conns_refused_total{grpc,auth_failed} = %v, want 1", got)
	}
}
