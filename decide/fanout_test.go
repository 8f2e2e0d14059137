package decide

import (
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/index"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/tracking"
)

// A fan-out waits for every reply it asked for until its deadline: then
// it gives up, says what was missing, and any later reply is late.
func TestFanout(t *testing.T) {
	t0 := time.Unix(100, 0)
	r1 := kv.WorkerWithDpRank{WorkerID: 1}
	packed, _ := PackOverlaps(map[kv.WorkerWithDpRank]index.TierMatch{r1: {Device: 3}}, nil, nil)
	for _, tt := range []struct {
		name           string
		shards, ranks  int // replies that arrive in time
		at             time.Duration
		expired        bool
		missS, missR   int
		allShards      bool
		overlap, loads int
	}{
		{name: "all in", shards: 2, ranks: 1, at: time.Second, allShards: true, overlap: 3, loads: 1},
		{name: "waiting, before the deadline", shards: 1, at: 100 * time.Millisecond, overlap: 3},
		{name: "a shard and the load missing", shards: 1, at: 300 * time.Millisecond, expired: true, missS: 1, missR: 1, overlap: 3},
		{name: "nothing arrived", at: time.Second, expired: true, missS: 2, missR: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var f Fanout
			f.Deadline = t0.Add(250 * time.Millisecond)
			f.AskShards(2)
			f.AskLoads()
			f.AskedRank()
			for i := range tt.shards {
				r := packed
				if i > 0 {
					r = nil // the other shard holds nothing
				}
				if !f.OnOverlap(&messages.OverlapReply{Ranks: r, SharedBlocks: uint32(i)}) {
					t.Fatal("a reply in time was refused")
				}
			}
			for range tt.ranks {
				f.OnLoad(&messages.LoadReply{Worker: RankMsg(r1), ActiveRequests: 2})
			}
			s, r, expired := f.Expire(t0.Add(tt.at))
			if expired != tt.expired || s != tt.missS || r != tt.missR {
				t.Fatalf("expire: %d %d %v, want %d %d %v", s, r, expired, tt.missS, tt.missR, tt.expired)
			}
			if f.Waiting() == (tt.expired || tt.allShards) {
				t.Fatalf("waiting %v", f.Waiting())
			}
			if tt.expired && (f.OnOverlap(&messages.OverlapReply{}) || f.OnLoad(&messages.LoadReply{}) || f.OnRankReply()) {
				t.Fatal("a late reply was taken")
			}
			if f.AllShardsAnswered(2) != tt.allShards {
				t.Fatalf("all shards answered %v", f.AllShardsAnswered(2))
			}
			row, _ := f.Overlaps.Find(r1)
			if int(row.Device) != tt.overlap || len(f.Loads) != tt.loads {
				t.Fatalf("overlap %d loads %d", row.Device, len(f.Loads))
			}
		})
	}
}

// A freed request takes its prefill hop with it; a hop freed on its own
// (its answer arrived) frees nothing else.
func TestFreed(t *testing.T) {
	t1 := tracking.New()
	w := kv.WorkerWithDpRank{WorkerID: 2}
	t1.Track("a", tracking.Entry{Rank: w})
	t1.Track("a#prefill", tracking.Entry{Rank: w})
	t1.Track("b", tracking.Entry{Rank: w})
	if hop, _, ok := Freed(t1, "a#prefill"); ok || t1.Len() != 2 {
		t.Fatalf("freeing a hop freed %q too (left %d)", hop, t1.Len())
	}
	t1.Track("a#prefill", tracking.Entry{Rank: w})
	if hop, e, ok := Freed(t1, "a"); !ok || hop != "a#prefill" || e.Rank != w || t1.Len() != 1 {
		t.Fatalf("freed %q %v %v, left %d", hop, e, ok, t1.Len())
	}
	if _, _, ok := Freed(t1, "b"); ok || t1.Len() != 0 {
		t.Fatalf("b had no hop: %v, left %d", ok, t1.Len())
	}
}
