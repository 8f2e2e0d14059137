package cluster

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kvrouter/kvrouter/messages"
)

func TestFrameRoundTrip(t *testing.T) {
	evs := []*messages.SequenceEvent{
		{Origin: "a", Seq: 1, Data: addEvent("r1", 1, 2).Data},
		{Origin: "a", Seq: 2, Data: freeEvent("r1").Data},
	}
	batch, err := encodeBatch(evs)
	if err != nil {
		t.Fatal(err)
	}
	reply, err := encodeStateReply(stateReply{Origin: "a", Nonce: 9, Seq: 2, Events: evs})
	if err != nil {
		t.Fatal(err)
	}
	digest := digestMsg{Origin: "a", Seq: 1 << 40, Digest: Digest{Count: 3, Hash: 0xfeedface12345678}}
	request := stateRequest{Requester: "b", Nonce: 77}
	sessionEvs := []*messages.SequenceEvent{
		{Origin: "a", Data: &messages.SequenceEvent_SessionBound{SessionBound: &messages.SessionBound{
			SessionId: "s", Worker: &messages.WorkerRank{WorkerId: 3, DpRank: 1}, Stamp: 10, Writer: "c", LastUsedUnixNano: 11}}},
		{Origin: "a", Data: &messages.SequenceEvent_SessionEnded{SessionEnded: &messages.SessionEnded{
			SessionId: "t", Stamp: 12, Writer: "a", LastUsedUnixNano: 13}}},
	}
	tests := []struct {
		name  string
		buf   []byte
		check func(t *testing.T, f frame)
	}{
		{"batch", batch, func(t *testing.T, f frame) {
			if f.kind != frameBatch || !eventsEqual(f.batch, evs) {
				t.Fatalf("got %+v", f)
			}
		}},
		{"digest", encodeDigest(digest), func(t *testing.T, f frame) {
			if f.kind != frameDigest || f.digest != digest {
				t.Fatalf("got %+v", f.digest)
			}
		}},
		{"state request", encodeStateRequest(request), func(t *testing.T, f frame) {
			if f.kind != frameStateRequest || f.request != request {
				t.Fatalf("got %+v", f.request)
			}
		}},
		{"state reply", reply, func(t *testing.T, f frame) {
			r := f.reply
			if f.kind != frameStateReply || r.Origin != "a" || r.Nonce != 9 || r.Seq != 2 || !eventsEqual(r.Events, evs) {
				t.Fatalf("got %+v", r)
			}
		}},
		{"session digest", encodeSessionDigest(sessionDigestMsg{Origin: "a", Digest: Digest{Count: 7, Hash: 1 << 63}}), func(t *testing.T, f frame) {
			if f.kind != frameSessionDigest || f.sessionDigest != (sessionDigestMsg{Origin: "a", Digest: Digest{Count: 7, Hash: 1 << 63}}) {
				t.Fatalf("got %+v", f.sessionDigest)
			}
		}},
		{"session request", encodeSessionRequest(request), func(t *testing.T, f frame) {
			if f.kind != frameSessionRequest || f.sessionRequest != request {
				t.Fatalf("got %+v", f.sessionRequest)
			}
		}},
		{"session reply", mustSessionReply(t, sessionReply{Origin: "a", Nonce: 5, Entries: sessionEvs}), func(t *testing.T, f frame) {
			r := f.sessionReply
			if f.kind != frameSessionReply || r.Origin != "a" || r.Nonce != 5 || !eventsEqual(r.Entries, sessionEvs) {
				t.Fatalf("got %+v", r)
			}
		}},
		{"empty state reply", mustReply(t, stateReply{Origin: "a"}), func(t *testing.T, f frame) {
			if f.kind != frameStateReply || len(f.reply.Events) != 0 {
				t.Fatalf("got %+v", f.reply)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := decodeFrame(tt.buf)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, f)
		})
	}
}

func mustSessionReply(t *testing.T, r sessionReply) []byte {
	t.Helper()
	b, err := encodeSessionReply(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustReply(t *testing.T, r stateReply) []byte {
	t.Helper()
	b, err := encodeStateReply(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func eventsEqual(a, b []*messages.SequenceEvent) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func TestDecodeFrameRejectsGarbage(t *testing.T) {
	digest := encodeDigest(digestMsg{Origin: "a", Seq: 1, Digest: Digest{Count: 1, Hash: 2}})
	tests := []struct {
		name string
		buf  []byte
	}{
		{"empty", nil},
		{"unknown kind", []byte{99, 1, 2}},
		{"batch not proto", []byte{byte(frameBatch), 0xff, 0xff, 0xff}},
		{"digest truncated", digest[:len(digest)-3]},
		{"digest trailing bytes", append(append([]byte{}, digest...), 0)},
		{"digest huge name", []byte{byte(frameDigest), 0xff, 0xff, 0x03, 'a'}},
		{"digest bad varint", []byte{byte(frameDigest), 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80}},
		{"request truncated", []byte{byte(frameStateRequest), 5, 'a'}},
		{"reply header only", []byte{byte(frameStateReply), 1}},
		{"session digest truncated", encodeSessionDigest(sessionDigestMsg{Origin: "a"})[:4]},
		{"session request trailing bytes", append(encodeSessionRequest(stateRequest{Requester: "b", Nonce: 1}), 0)},
		{"session reply not proto", []byte{byte(frameSessionReply), 1, 'a', 1, 0xff, 0xff}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := decodeFrame(tt.buf); !errors.Is(err, ErrMalformed) {
				t.Fatalf("decodeFrame error = %v, want ErrMalformed", err)
			}
		})
	}
}

func FuzzDecodeFrame(f *testing.F) {
	batch, _ := encodeBatch([]*messages.SequenceEvent{{Origin: "a", Seq: 1, Data: addEvent("r", 1).Data}})
	reply, _ := encodeStateReply(stateReply{Origin: "a", Nonce: 1, Seq: 1, Events: []*messages.SequenceEvent{{Origin: "a", Seq: 1, Data: freeEvent("r").Data}}})
	f.Add(batch)
	f.Add(reply)
	f.Add(encodeDigest(digestMsg{Origin: "a", Seq: 3, Digest: Digest{Count: 2, Hash: 5}}))
	f.Add(encodeStateRequest(stateRequest{Requester: "b", Nonce: 4}))
	f.Add(encodeSessionDigest(sessionDigestMsg{Origin: "a", Digest: Digest{Count: 1, Hash: 2}}))
	f.Add(encodeSessionRequest(stateRequest{Requester: "b", Nonce: 4}))
	sr, _ := encodeSessionReply(sessionReply{Origin: "a", Nonce: 2, Entries: []*messages.SequenceEvent{{Origin: "a",
		Data: &messages.SequenceEvent_SessionEnded{SessionEnded: &messages.SessionEnded{SessionId: "s", Stamp: 1, Writer: "a"}}}}})
	f.Add(sr)
	f.Fuzz(func(t *testing.T, buf []byte) {
		fr, err := decodeFrame(buf)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		// Whatever decodes must re-encode to something that decodes the same.
		var again []byte
		switch fr.kind {
		case frameDigest:
			again = encodeDigest(fr.digest)
		case frameStateRequest:
			again = encodeStateRequest(fr.request)
		case frameSessionDigest:
			again = encodeSessionDigest(fr.sessionDigest)
		case frameSessionRequest:
			again = encodeSessionRequest(fr.sessionRequest)
		default:
			return
		}
		fr2, err := decodeFrame(again)
		if err != nil || fr2.digest != fr.digest || fr2.request != fr.request ||
			fr2.sessionDigest != fr.sessionDigest || fr2.sessionRequest != fr.sessionRequest {
			t.Fatalf("re-decode: %+v, %v", fr2, err)
		}
	})
}
