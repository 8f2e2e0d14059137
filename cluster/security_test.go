package cluster

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/messages"
)

// testKey is a deterministic cluster key (tests only).
func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func withKeys(keys ...[]byte) func(*Config) {
	return func(c *Config) { c.Keys = keys }
}

// forgedBatch encodes events as origin claims them.
func forgedBatch(t *testing.T, origin string, seq uint64, evs ...*messages.SequenceEvent) []byte {
	t.Helper()
	out := make([]*messages.SequenceEvent, len(evs))
	for i, ev := range evs {
		out[i] = &messages.SequenceEvent{Origin: origin, Seq: seq + uint64(i), Data: ev.Data}
	}
	b, err := encodeBatch(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// streamFrame is the 4-byte header of a stream frame carrying payload.
func streamFrame(payload []byte) []byte {
	return binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
}

// requestIDs lists every request the holder holds, as origin/id.
func (h *holder) requestIDs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for origin, reqs := range h.origins {
		for id := range reqs {
			out = append(out, origin+"/"+id)
		}
	}
	return out
}

// quietMember keeps a replica from writing to its peers on its own (no
// digests for a minute), so a test's stream in its name is not displaced
// by its sender reconnecting.
func quietMember(c *Config) {
	c.AntiEntropyInterval, c.StreamIdleTimeout = time.Minute, 2*time.Minute
}

func writeFrame(t *testing.T, w io.Writer, payload []byte) {
	t.Helper()
	if _, err := w.Write(append(streamFrame(payload), payload...)); err != nil {
		t.Fatalf("write frame: %v", err)
	}
}

func streamAddr(r *replica) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.node.streams.port()))
}

// startStranger starts a bare memberlist node on loopback holding keys
// (none: unencrypted), as someone outside the fleet would.
func startStranger(t *testing.T, name string, keys [][]byte, label string) *memberlist.Memberlist {
	t.Helper()
	mc := memberlist.DefaultLocalConfig()
	mc.Name, mc.BindAddr, mc.BindPort, mc.AdvertisePort = name, "127.0.0.1", 0, 0
	mc.Label = label
	mc.TCPTimeout = 500 * time.Millisecond
	mc.Logger = log.New(io.Discard, "", 0)
	if len(keys) > 0 {
		ring, err := memberlist.NewKeyring(keys, keys[0])
		if err != nil {
			t.Fatal(err)
		}
		mc.Keyring = ring
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ml.Shutdown() })
	return ml
}

func mlNode(t *testing.T, r *replica) *memberlist.Node {
	t.Helper()
	host, port, err := net.SplitHostPort(r.node.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	return &memberlist.Node{Name: r.node.ID(), Addr: net.ParseIP(host), Port: uint16(p)}
}

// settle proves that r0 has handled what was sent to it before: a
// request published by from afterwards reaches it.
func settle(t *testing.T, from, to *replica, id string) {
	t.Helper()
	mustPublish(t, from, addEvent(id, 1))
	testutil.Eventually(t, 3*time.Second, id+" at "+to.node.ID(), func() bool {
		_, ok := to.sink.view(from.node.ID())[id]
		return ok
	})
	time.Sleep(100 * time.Millisecond) // UDP and TCP paths are not ordered with the stream
}

// A node without the cluster key (or with another key, or another label)
// can neither join nor inject events, over memberlist's UDP and TCP paths
// or the stream port.
func TestStrangerCannotJoinOrInject(t *testing.T) {
	rs := startCluster(t, 2, withKeys(testKey(1)))
	r0, r1 := rs[0], rs[1]
	mustPublish(t, r1, addEvent("live", 1))
	testutil.Eventually(t, 2*time.Second, "r1's request at r0", func() bool { return len(r0.sink.view("r1")) == 1 })

	injected := 0
	for _, s := range []struct {
		name, label string
		keys        [][]byte
	}{
		{"keyless", "", nil},
		{"wrong-key", "", [][]byte{testKey(2)}},
	} {
		ml := startStranger(t, s.name, s.keys, s.label)
		if _, err := ml.Join([]string{r0.node.LocalAddr()}); err == nil {
			t.Errorf("%s joined the cluster", s.name)
		}
		// Speak to r0 directly, without joining: one UDP packet, one
		// memberlist TCP message, each claiming to be r1 (a live member)
		// and a stranger, with fake adds and a free of r1's live request.
		for i, send := range []func(*memberlist.Node, []byte) error{ml.SendBestEffort, ml.SendReliable} {
			for _, origin := range []string{"r1", s.name} {
				injected++
				b := forgedBatch(t, origin, 1000, addEvent(fmt.Sprintf("fake-%s-%d-%s", s.name, i, origin), 9), freeEvent("live"))
				if err := send(mlNode(t, r0), b); err != nil {
					t.Logf("%s: send: %v", s.name, err)
				}
			}
		}
	}
	// The stream port, in plaintext, as before streams had TLS.
	if conn, err := net.DialTimeout("tcp", streamAddr(r0), time.Second); err == nil {
		writeFrame(t, conn, forgedBatch(t, "r1", 2000, addEvent("fake-stream", 9), freeEvent("live")))
		_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, _ = io.Copy(io.Discard, conn) // until r0 closes it
		conn.Close()
	}
	settle(t, r1, r0, "after-attack")

	for _, r := range rs {
		if m := r.node.Stats().Members; m != 2 {
			t.Errorf("%s has %d members, want 2", r.node.ID(), m)
		}
	}
	for _, id := range r0.sink.requestIDs() {
		if strings.Contains(id, "/fake") {
			t.Errorf("r0 holds injected request %s", id)
		}
	}
	if _, ok := r0.sink.view("r1")["live"]; !ok {
		t.Error("a forged free removed r1's live request")
	}
	st := r0.node.Stats()
	t.Logf("r0 after %d injections: %+v", injected, st)
	if st.StreamsRefused == 0 {
		t.Error("the plaintext stream was not counted as refused")
	}
}

// A second fleet with the same key but another label does not merge.
func TestLabelSeparatesFleets(t *testing.T) {
	a := startReplica(t, "a0", nil, func(c *Config) { c.Keys, c.Label = [][]byte{testKey(1)}, "fleet-a" })
	cfg := testConfig("b0")
	cfg.Keys, cfg.Label, cfg.Join, cfg.RejoinInterval = [][]byte{testKey(1)}, "fleet-b", []string{a.node.LocalAddr()}, 0
	if n, err := Start(t.Context(), cfg, newHolder("b0")); err == nil {
		n.Shutdown()
		t.Fatal("a node with another label joined")
	}
	if m := a.node.Stats().Members; m != 1 {
		t.Fatalf("a0 has %d members", m)
	}
}

// memberStream opens an authenticated stream to `to` as member `as` would
// (its own boot key and the cluster key), bypassing as's sender.
func memberStream(t *testing.T, as, to *replica) net.Conn {
	t.Helper()
	conn, err := as.node.dialStream(streamAddr(to), to.node.ID())
	if err != nil {
		t.Fatalf("%s cannot open a stream to %s: %v", as.node.ID(), to.node.ID(), err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// A member speaks only for itself: over its stream or memberlist's
// paths, frames with another origin's events (a free of its live request,
// a fake add), digest, full state or state request are dropped whole.
func TestMemberCannotSpeakForAnotherOrigin(t *testing.T) {
	key := withKeys(testKey(1))
	r0 := startReplica(t, "r0", nil, key)
	r1 := startReplica(t, "r1", []string{r0.node.LocalAddr()}, func(c *Config) { key(c); quietMember(c) })
	r2 := startReplica(t, "r2", []string{r0.node.LocalAddr()}, key)
	waitMembers(t, 3, r0, r1, r2)
	mustPublish(t, r2, addEvent("r2-live", 1))
	testutil.Eventually(t, 2*time.Second, "r2's request at r0", func() bool { return len(r0.sink.view("r2")) == 1 })

	reply, err := encodeStateReply(stateReply{Origin: "r2", Nonce: 1, Seq: 500,
		Events: []*messages.SequenceEvent{{Origin: "r2", Seq: 500, Data: addEvent("forged-state", 5).Data}}})
	if err != nil {
		t.Fatal(err)
	}
	forged := [][]byte{
		forgedBatch(t, "r2", 2, freeEvent("r2-live")),
		forgedBatch(t, "r2", 2, addEvent("forged-add", 5)),
		// r1's own event first, then one in r2's name: dropped whole.
		mustEncode(t, []*messages.SequenceEvent{
			{Origin: "r1", Seq: 1, Data: addEvent("forged-mixed", 5).Data},
			{Origin: "r2", Seq: 2, Data: freeEvent("r2-live").Data},
		}),
		encodeDigest(digestMsg{Origin: "r2", Seq: 1}),
		encodeStateRequest(stateRequest{Requester: "r2", Nonce: 3}),
		reply,
	}
	conn := memberStream(t, r1, r0)
	for _, f := range forged {
		writeFrame(t, conn, f)
	}
	testutil.Eventually(t, 3*time.Second, "forged stream frames counted", func() bool {
		return r0.node.Stats().ForeignFrames >= uint64(len(forged))
	})
	// memberlist's paths: signed by r1 but in r2's name, and signed by r1
	// while claiming to be r2.
	to := mlNode(t, r0)
	if err := r1.node.ml.SendReliable(to, encodeSigned(r1.node.signKey, "", "r1", forged[0])); err != nil {
		t.Fatal(err)
	}
	if err := r1.node.ml.SendReliable(to, encodeSigned(r1.node.signKey, "", "r2", forged[1])); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 3*time.Second, "forged memberlist messages dropped", func() bool {
		st := r0.node.Stats()
		return st.ForeignFrames >= uint64(len(forged))+1 && st.Unauthenticated >= 1
	})
	settle(t, r2, r0, "r2-after")
	if _, ok := r0.sink.view("r2")["r2-live"]; !ok {
		t.Fatal("r1 freed r2's live request in r2's name")
	}
	for _, id := range r0.sink.requestIDs() {
		if strings.Contains(id, "/forged") {
			t.Errorf("r0 holds %s", id)
		}
	}
	if st := r2.node.Stats(); st.StateReplies != 0 {
		t.Errorf("r2 served %d full states; the request in its name came from r1", st.StateReplies)
	}
}

func mustEncode(t *testing.T, evs []*messages.SequenceEvent) []byte {
	t.Helper()
	b, err := encodeBatch(evs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A stream that sends a frame header announcing the largest frame and
// then nothing allocates nothing for it and is closed by the frame
// deadline; connections that never finish the handshake are closed by
// its deadline and cost no frame buffer either.
func TestHeaderOnlyStreamIsCheapAndTimesOut(t *testing.T) {
	const frameTimeout = 300 * time.Millisecond
	tweak := func(c *Config) {
		c.Keys = [][]byte{testKey(1)}
		c.StreamFrameTimeout = frameTimeout
		c.TCPTimeout = 500 * time.Millisecond
	}
	r0 := startReplica(t, "r0", nil, tweak)
	r1 := startReplica(t, "r1", []string{r0.node.LocalAddr()}, func(c *Config) { tweak(c); quietMember(c) })
	waitMembers(t, 2, r0, r1)
	before := heapInUse()

	conn := memberStream(t, r1, r0)
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(r0.node.cfg.MaxFrameBytes))
	// Strangers: 8 plaintext connections sending only a frame header.
	var strangers []net.Conn
	for range 8 {
		c, err := net.Dial("tcp", streamAddr(r0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write(hdr[:]); err != nil {
			t.Fatal(err)
		}
		strangers = append(strangers, c)
	}
	sent := time.Now()
	if _, err := conn.Write(hdr[:]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(frameTimeout / 2)
	grown := int64(heapInUse()) - int64(before)
	t.Logf("heap grew %d kB with a %d MB frame announced by a member and 8 header-only strangers", grown>>10, r0.node.cfg.MaxFrameBytes>>20)
	if grown > 8<<20 {
		t.Errorf("heap grew %d MB: the announced frame was allocated before its data", grown>>20)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data from the server")
	}
	closedAfter := time.Since(sent)
	t.Logf("member's header-only stream closed after %v (frame deadline %v)", closedAfter, frameTimeout)
	if closedAfter > frameTimeout+2*time.Second {
		t.Errorf("closed after %v, deadline %v", closedAfter, frameTimeout)
	}
	for _, c := range strangers {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Errorf("stranger's connection not closed by the handshake deadline: %v", err)
		}
	}
	st := r0.node.Stats()
	if st.StreamTimeouts == 0 || st.StreamsRefused < 8 {
		t.Fatalf("r0 stats %+v: want a stream timeout and 8 refusals", st)
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// Only a current member can open a stream: not a stranger in plaintext,
// not a certificate from another key, not a stranger holding the key (it
// is no memberlist member), not a key holder claiming to be a member
// (its hello is not signed by that member's boot key). Past
// MaxInboundStreams connections are closed at once.
func TestStreamRefusesNonMembers(t *testing.T) {
	rs := startCluster(t, 2, func(c *Config) {
		c.Keys, c.MaxInboundStreams, c.TCPTimeout = [][]byte{testKey(1)}, 4, 300*time.Millisecond
	})
	r0, r1 := rs[0], rs[1]
	good, err := newStreamTrust(Config{}, [][]byte{testKey(1)})
	if err != nil {
		t.Fatal(err)
	}
	other, err := newStreamTrust(Config{}, [][]byte{testKey(2)})
	if err != nil {
		t.Fatal(err)
	}
	_, strangerKey, _ := ed25519.GenerateKey(rand.Reader)
	for _, a := range []struct {
		name  string
		trust *tls.Config
		key   ed25519.PrivateKey
		from  string
	}{
		{"plaintext", nil, strangerKey, "ghost"},
		{"another key", other.clientConfig(), strangerKey, "ghost"},
		{"key holder, not a member", good.clientConfig(), strangerKey, "ghost"},
		{"key holder claiming r1", good.clientConfig(), strangerKey, "r1"},
	} {
		raw, err := net.Dial("tcp", streamAddr(r0))
		if err != nil {
			t.Fatal(err)
		}
		conn, err := clientHandshake(raw, a.trust, a.key, hello{from: a.from, to: "r0"}, time.Now().Add(5*time.Second))
		raw.Close()
		if err == nil {
			t.Errorf("%s: stream accepted", a.name)
			continue
		}
		t.Logf("%s: %v", a.name, err)
		_ = conn
	}
	testutil.Eventually(t, 5*time.Second, "4 refusals counted", func() bool { return r0.node.Stats().StreamsRefused >= 4 })

	// The cap: r1's stream holds one slot; fill the rest with idle
	// connections and one more is closed at once.
	var idle []net.Conn
	for range 4 {
		c, err := net.Dial("tcp", streamAddr(r0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		idle = append(idle, c)
	}
	testutil.Eventually(t, 2*time.Second, "a connection over the cap refused", func() bool { return r0.node.Stats().StreamsOverLimit >= 1 })
	for _, c := range idle {
		c.Close()
	}
	settle(t, r1, r0, "still-flowing")
}

// Keys rotate without a partition: add the new key second everywhere,
// make it primary (here one replica first: a mixed fleet), remove the old.
// At every step gossip flows, streams (re)open, and a replica with only
// the retired key is shut out at the end.
func TestKeyRotation(t *testing.T) {
	oldKey, newKey := testKey(1), testKey(2)
	dir := t.TempDir()
	write := func(name string, keys ...[]byte) {
		var b strings.Builder
		b.WriteString("# cluster keys, primary first\n")
		for _, k := range keys {
			b.WriteString(base64.StdEncoding.EncodeToString(k) + "\n")
		}
		tmp := filepath.Join(dir, name+".tmp")
		if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	keyFile := func(name string) func(*Config) {
		return func(c *Config) { c.KeyFile, c.KeyReloadInterval = filepath.Join(dir, name), 50*time.Millisecond }
	}
	write("r0", oldKey)
	write("r1", oldKey)
	r0 := startReplica(t, "r0", nil, keyFile("r0"))
	r1 := startReplica(t, "r1", []string{r0.node.LocalAddr()}, keyFile("r1"))
	waitMembers(t, 2, r0, r1)

	step := func(name string, keys0, keys1 [][]byte) {
		t.Helper()
		write("r0", keys0...)
		write("r1", keys1...)
		for _, x := range []struct {
			r    *replica
			keys [][]byte
		}{{r0, keys0}, {r1, keys1}} {
			testutil.Eventually(t, 3*time.Second, name+": keys applied at "+x.r.node.ID(), func() bool {
				return strings.Join(x.r.node.KeyIDs(), ",") == strings.Join(keyIDs(x.keys), ",")
			})
		}
		// Fresh streams under the new keys, both ways.
		for _, r := range []*replica{r0, r1} {
			r.node.streams.mu.Lock()
			for _, c := range r.node.streams.byMember {
				c.Close()
			}
			r.node.streams.mu.Unlock()
		}
		settle(t, r0, r1, name+"-0")
		settle(t, r1, r0, name+"-1")
		waitMembers(t, 2, r0, r1)
	}
	step("add", [][]byte{oldKey, newKey}, [][]byte{oldKey, newKey})
	step("mixed primaries", [][]byte{newKey, oldKey}, [][]byte{oldKey, newKey})
	step("use", [][]byte{newKey, oldKey}, [][]byte{newKey, oldKey})
	step("remove", [][]byte{newKey}, [][]byte{newKey})
	if st := r0.node.Stats(); st.KeyChanges != 3 || st.Keys != 1 || st.KeyReloadErrors != 0 {
		t.Fatalf("r0 stats %+v: want 3 key changes, 1 key", st)
	}
	if st := r0.node.Stats(); st.StreamsRefused != 0 {
		t.Errorf("r0 refused %d streams during the rotation", st.StreamsRefused)
	}
	// A replica still on the retired key cannot join.
	cfg := testConfig("stale")
	cfg.Keys, cfg.Join, cfg.RejoinInterval = [][]byte{oldKey}, []string{r0.node.LocalAddr()}, 0
	if n, err := Start(t.Context(), cfg, newHolder("stale")); err == nil {
		n.Shutdown()
		t.Fatal("a replica with the retired key joined")
	}
	// A broken file keeps the keys in use.
	if err := os.WriteFile(filepath.Join(dir, "r0"), []byte("not base64!\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Second, "reload error counted", func() bool { return r0.node.Stats().KeyReloadErrors > 0 })
	if ids := r0.node.KeyIDs(); len(ids) != 1 || ids[0] != KeyID(newKey) {
		t.Fatalf("keys after a bad file: %v", ids)
	}
}

func waitMembers(t *testing.T, n int, rs ...*replica) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, fmt.Sprintf("%d members", n), func() bool {
		for _, r := range rs {
			if r.node.Stats().Members != n {
				return false
			}
		}
		return true
	})
}

func TestParseKeys(t *testing.T) {
	k16, k32 := base64.StdEncoding.EncodeToString(testKey(1)[:16]), base64.StdEncoding.EncodeToString(testKey(2))
	keys, err := ParseKeys([]byte("# rotation in progress\n\n  " + k32 + "  \n" + strings.TrimRight(k16, "=") + "\n"))
	if err != nil || len(keys) != 2 || !bytes.Equal(keys[0], testKey(2)) || !bytes.Equal(keys[1], testKey(1)[:16]) {
		t.Fatalf("ParseKeys = %x, %v", keys, err)
	}
	for _, bad := range []string{"", "# only a comment\n", "not base64\n", base64.StdEncoding.EncodeToString(make([]byte, 20)), k32 + "\n" + k32} {
		if _, err := ParseKeys([]byte(bad)); err == nil {
			t.Errorf("ParseKeys(%q) accepted", bad)
		}
	}
	if _, err := LoadKeyFile(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing key file loaded")
	}
	if id := KeyID(testKey(1)); len(id) != 8 || id == KeyID(testKey(2)) {
		t.Errorf("KeyID = %q", id)
	}
}

// setKeyring reaches any key set from any other, primary first, and never
// leaves the ring without a key both sets share.
func TestSetKeyring(t *testing.T) {
	k := func(b byte) []byte { return testKey(b) }
	for _, tc := range []struct{ from, to [][]byte }{
		{[][]byte{k(1)}, [][]byte{k(1), k(2)}},
		{[][]byte{k(1), k(2)}, [][]byte{k(2), k(1)}},
		{[][]byte{k(2), k(1)}, [][]byte{k(2)}},
		{[][]byte{k(1), k(2), k(3)}, [][]byte{k(3), k(1)}},
		{[][]byte{k(1), k(2), k(3)}, [][]byte{k(4)}},
	} {
		ring, err := memberlist.NewKeyring(tc.from, tc.from[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := setKeyring(ring, tc.to); err != nil {
			t.Fatal(err)
		}
		got := ring.GetKeys()
		if len(got) != len(tc.to) || !bytes.Equal(got[0], tc.to[0]) {
			t.Errorf("%v → %v: ring %v", keyIDs(tc.from), keyIDs(tc.to), keyIDs(got))
		}
		for _, want := range tc.to {
			found := false
			for _, g := range got {
				found = found || bytes.Equal(g, want)
			}
			if !found {
				t.Errorf("%v → %v: %s missing", keyIDs(tc.from), keyIDs(tc.to), KeyID(want))
			}
		}
	}
}

// The derived stream identity accepts exactly the keyring's keys.
func TestDerivedIdentity(t *testing.T) {
	a, err := newStreamTrust(Config{}, [][]byte{testKey(1), testKey(2)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key []byte
		ok  bool
	}{{testKey(1), true}, {testKey(2), true}, {testKey(3), false}} {
		id, err := deriveIdentity(tc.key)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.verify(id.cert.Certificate, nil); (err == nil) != tc.ok {
			t.Errorf("key %s: verify = %v, want ok=%v", KeyID(tc.key), err, tc.ok)
		}
	}
	again, _ := deriveIdentity(testKey(1))
	first := (*a.ids.Load())[0]
	if !bytes.Equal(again.pub, first.pub) {
		t.Error("derivation is not deterministic")
	}
	if err := a.verify(nil, nil); err == nil {
		t.Error("no certificate verified")
	}
}

// The decoders a stream runs on a peer's bytes (hello, frames, the
// frames' contents, signed envelopes) never panic, never return a frame
// larger than the cap, and accept what the encoders produce.
func FuzzStreamDecode(f *testing.F) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	h := hello{label: "l", from: "r1", to: "r0", sig: make([]byte, ed25519.SignatureSize)}
	batch, _ := encodeBatch([]*messages.SequenceEvent{{Origin: "r1", Seq: 1, Data: addEvent("x", 1, 2).Data}})
	var seed []byte
	seed = append(seed, encodeHello(h)...)
	for _, p := range [][]byte{batch, encodeDigest(digestMsg{Origin: "r1", Seq: 3}), encodeSigned(key, "l", "r1", batch)} {
		seed = append(append(seed, streamFrame(p)...), p...)
	}
	f.Add(seed)
	f.Add(append(encodeHello(h), 0xff, 0xff, 0xff, 0xff))
	f.Add([]byte("KVRH\x01\xff\xff\xff\xff\x0f"))
	f.Fuzz(func(t *testing.T, data []byte) {
		const maxFrame = 1 << 12
		r := bufio.NewReaderSize(bytes.NewReader(data), 16)
		if _, err := readHello(r); err != nil {
			return
		}
		fr := frameReader{r: r, max: maxFrame}
		for {
			buf, err := fr.next(nil)
			if err != nil {
				if !errors.Is(err, errFrameSize) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if len(buf) == 0 || len(buf) > maxFrame {
				t.Fatalf("frame of %d bytes", len(buf))
			}
			if from, _, inner, err := decodeSigned(buf); err == nil && (from == "" && len(inner) == 0) {
				t.Fatal("signed frame without content")
			}
			fm, err := decodeFrame(buf)
			if err != nil {
				continue
			}
			_ = fm.speaksFor("r1")
			if fm.kind == frameBatch {
				again, err := encodeBatch(fm.batch)
				if err == nil {
					if _, err := decodeFrame(again); err != nil {
						t.Fatalf("re-encoded batch does not decode: %v", err)
					}
				}
			}
		}
	})
}

// writeTestPKI writes a CA and a leaf certificate it signed (PEM) into
// dir, returning the paths: cert, key, ca.
func writeTestPKI(t *testing.T, dir, name string) (string, string, string) {
	t.Helper()
	caPub, caKey, _ := ed25519.GenerateKey(rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caPub, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name + " router"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, pub, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(file, typ string, der []byte) string {
		p := filepath.Join(dir, name+"-"+file)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("cert.pem", "CERTIFICATE", leafDER), write("key.pem", "PRIVATE KEY", keyDER), write("ca.pem", "CERTIFICATE", caDER)
}

// With certificate files the streams use mutual TLS under the operator's
// CA: members' streams carry the gossip; a certificate of another CA is
// refused.
func TestMutualTLSStreams(t *testing.T) {
	dir := t.TempDir()
	cert, key, ca := writeTestPKI(t, dir, "fleet")
	rs := startCluster(t, 2, func(c *Config) {
		c.Keys = [][]byte{testKey(1)}
		c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile = cert, key, ca
	})
	r0, r1 := rs[0], rs[1]
	settle(t, r1, r0, "over-mtls")
	if st := r0.node.Stats(); st.StreamsAccepted == 0 || r1.node.Stats().StreamMessages == 0 {
		t.Fatalf("gossip did not use the mTLS stream: r0 %+v", st)
	}
	oCert, oKey, oCA := writeTestPKI(t, dir, "other")
	other, err := newStreamTrust(Config{TLSCertFile: oCert, TLSKeyFile: oKey, TLSCAFile: oCA}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.Dial("tcp", streamAddr(r0))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := clientHandshake(raw, other.clientConfig(), r1.node.signKey, hello{from: "r1", to: "r0"}, time.Now().Add(5*time.Second)); err == nil {
		t.Fatal("a certificate of another CA opened a stream")
	} else {
		t.Logf("other CA: %v", err)
	}
	if _, err := newStreamTrust(Config{TLSCertFile: filepath.Join(dir, "missing"), TLSKeyFile: key, TLSCAFile: ca}, nil); err == nil {
		t.Fatal("a missing certificate file was accepted")
	}
}
