package natsbus

import (
	"context"
	"encoding/binary"
	"math"
	"math/big"
	"testing"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
)

func TestEventIDStep(t *testing.T) {
	for _, c := range []struct {
		name      string
		last, id  uint64
		skipped   uint64
		continues bool
	}{
		{"next", 4, 5, 0, true},
		{"gap", 4, 8, 3, true},
		{"largest gap", 0, MaxEventIDGap + 1, MaxEventIDGap, true},
		{"jump past the largest gap", 0, MaxEventIDGap + 2, 0, false},
		{"repeat", 5, 5, 0, false},
		{"step back", 5, 0, 0, false},
		{"negative id (-1) after a small one", 5, math.MaxUint64, 0, false},
		{"small id after a negative one", math.MaxUint64, 3, 0, false},
		{"wrap to 0", math.MaxUint64, 0, 0, false},
		{"negative ids counting up (-3 → -1)", math.MaxUint64 - 2, math.MaxUint64, 1, true},
		{"largest ids", math.MaxUint64 - 1, math.MaxUint64, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			skipped, ok := EventIDStep(c.last, c.id)
			if skipped != c.skipped || ok != c.continues {
				t.Fatalf("EventIDStep(%d, %d) = %d, %v; want %d, %v", c.last, c.id, skipped, ok, c.skipped, c.continues)
			}
		})
	}
}

// A negative event_id (read as 2^64-1 by the JSON decoder) used to add
// nearly 2^64 to the gap counter, which wrapped; now it is a
// discontinuity, and the ids after it count from it.
func TestEventSourceNegativeEventIDKeepsGapsExact(t *testing.T) {
	e := startServer(t)
	nc := dial(t, e)
	var c collector
	src, err := StartEventSource(context.Background(), nc, EventSourceConfig{Subject: "kv.neg", Log: quiet}, c.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	msgs := []string{
		`{"worker_id":1,"event":{"event_id":1,"data":"cleared"}}`,
		`{"worker_id":1,"event":{"event_id":2,"data":"cleared"}}`,
		`{"worker_id":1,"event":{"event_id":-1,"data":"cleared"}}`,                   // discontinuity
		`{"worker_id":1,"event":{"event_id":3,"data":"cleared"}}`,                    // discontinuity (below 2^64-1)
		`{"worker_id":1,"event":{"event_id":5,"data":"cleared"}}`,                    // 4 lost
		`{"worker_id":1,"event":{"event_id":-9223372036854775808,"data":"cleared"}}`, // 2^63: discontinuity
	}
	for _, m := range msgs {
		if err := nc.Publish("kv.neg", []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, waitTimeout, "all events", func() bool { return c.len() == len(msgs) })
	if st := src.Stats(); st.Gaps != 1 || st.Reordered != 3 {
		t.Fatalf("stats %+v, want 1 gap and 3 discontinuities", st)
	}
}

// FuzzEventIDGaps feeds arbitrary event-id sequences (8 bytes each, one
// rank) to the tracker and checks the gap counter against the same rule
// computed with unbounded integers: it never wraps.
func FuzzEventIDGaps(f *testing.F) {
	f.Add([]byte{})
	f.Add(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, 1), math.MaxUint64))
	f.Add(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, 0), 1<<32+1))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &EventSource{lastID: map[kv.WorkerWithDpRank]uint64{}}
		want, reordered := new(big.Int), uint64(0)
		var last *big.Int
		for ; len(data) >= 8; data = data[8:] {
			id := binary.BigEndian.Uint64(data)
			s.track(kv.WorkerWithDpRank{}, id)
			cur := new(big.Int).SetUint64(id)
			if last != nil {
				step := new(big.Int).Sub(cur, last) // exact
				step.Sub(step, big.NewInt(1))
				if step.Sign() >= 0 && step.Cmp(big.NewInt(MaxEventIDGap)) <= 0 {
					want.Add(want, step)
				} else {
					reordered++
				}
			}
			last = cur
		}
		st := s.Stats()
		if !want.IsUint64() || st.Gaps != want.Uint64() || st.Reordered != reordered {
			t.Fatalf("gaps %d, reordered %d; want %s and %d", st.Gaps, st.Reordered, want, reordered)
		}
	})
}
