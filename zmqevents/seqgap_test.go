package zmqevents

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

// seqStream is one rank's stream without sockets (no replay endpoint):
// onLive is fed frames directly and the handled events are counted.
func seqStream(t *testing.T) (*rankStream, *int) {
	t.Helper()
	cleared := new(int)
	opts, err := Options{BlockSize: 4, Logger: slog.New(slog.DiscardHandler), Handler: func(ev *kv.Event) {
		if ev.Kind == kv.EventCleared {
			*cleared++
		}
	}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	s := &Subscriber{cfg: WorkerEndpoint{WorkerID: 7}, opts: opts, conv: Converter{BlockSize: 4},
		refs: NewRefCounter(), log: opts.Logger}
	return &rankStream{s: s, watch: &connWatch{total: &s.c.connections}}, cleared
}

func liveFrames(t *testing.T, seq uint64) [][]byte {
	t.Helper()
	frames, err := EncodeMessage("", seq, &Batch{}, EncodingArray)
	if err != nil {
		t.Fatal(err)
	}
	return frames
}

// A sequence number that jumps by more than MaxSeqGap (a negative one
// read as unsigned, a corrupt frame) used to add up to 2^64 to Lost and
// wrap it; now it is a restart, and real gaps still count exactly.
func TestSeqJumpIsARestartNotAGap(t *testing.T) {
	const neg1 = math.MaxUint64
	for _, c := range []struct {
		name              string
		seqs              []uint64
		lost, restarts    uint64
		clearedPerRestart bool
	}{
		{"in order", []uint64{0, 1, 2, 3}, 0, 0, false},
		{"gap", []uint64{0, 1, 5}, 3, 0, false},
		{"largest gap", []uint64{0, MaxSeqGap + 1}, MaxSeqGap, 0, false},
		{"jump past the largest gap", []uint64{0, MaxSeqGap + 2, MaxSeqGap + 3}, 0, 1, true},
		{"negative sequence, then back (a restart that missed 0..2)", []uint64{0, 1, 2, neg1, 3, 4}, 3, 2, true},
		{"wrap at 2^64", []uint64{neg1 - 1, neg1, 0, 1}, 0, 1, true},
		{"far from 0 after going back", []uint64{1 << 40, 1<<40 + 1, 1 << 39, 1<<39 + 2}, 1, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs, cleared := seqStream(t)
			for _, seq := range c.seqs {
				rs.onLive(context.Background(), liveFrames(t, seq))
			}
			st := rs.s.Stats()
			if st.Lost != c.lost || st.Restarts != c.restarts || st.Messages != uint64(len(c.seqs)) {
				t.Fatalf("stats %+v, want lost %d, restarts %d", st, c.lost, c.restarts)
			}
			if want := int(c.restarts) * int(kv.NumTiers); *cleared != want {
				t.Fatalf("%d Cleared events, want %d (one per tier and restart)", *cleared, want)
			}
		})
	}
}

// Whatever the sequence numbers, Lost grows by at most MaxSeqGap per
// message, so it cannot wrap.
func TestSeqLostIsBounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		rs, _ := seqStream(t)
		n := 1 + rng.IntN(50)
		for range n {
			var seq uint64
			switch rng.IntN(3) {
			case 0:
				seq = rng.Uint64()
			case 1:
				seq = math.MaxUint64 - rng.Uint64N(4)
			default:
				seq = rs.next + rng.Uint64N(3)
			}
			rs.onLive(context.Background(), liveFrames(t, seq))
		}
		if st := rs.s.Stats(); st.Lost > uint64(n)*MaxSeqGap {
			t.Fatalf("lost %d after %d messages", st.Lost, n)
		}
	}
}
