package mockengine

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/kv"
)

// recorder collects a rank's events.
type recorder struct{ events []kv.Event }

func (r *recorder) emit(ev kv.Event) { r.events = append(r.events, ev) }

func (r *recorder) take() []kv.Event {
	out := r.events
	r.events = nil
	return out
}

func smallConfig(blockSize, totalBlocks int) Config {
	cfg := DefaultConfig()
	cfg.WorkerID = 7
	cfg.BlockSize = blockSize
	cfg.TotalKVBlocks = totalBlocks
	return cfg
}

func newTestRank(t *testing.T, cfg Config) (*Rank, *recorder) {
	t.Helper()
	rec := &recorder{}
	r, err := NewRank(cfg, 0, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	return r, rec
}

// seqTokens returns n tokens start, start+1, ...
func seqTokens(start, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(start + i)
	}
	return out
}

// drain steps the rank until idle and returns the outputs by request.
func drain(t *testing.T, r *Rank) map[string][]Output {
	t.Helper()
	got := map[string][]Output{}
	for steps := 0; ; steps++ {
		if steps > 100000 {
			t.Fatal("rank did not become idle")
		}
		outs, ok := r.Step()
		if !ok {
			return got
		}
		for _, o := range outs {
			got[o.RequestID] = append(got[o.RequestID], o)
		}
	}
}

func mustAdd(t *testing.T, r *Rank, id string, prompt []uint32, maxTokens int) {
	t.Helper()
	if err := r.Add(Request{ID: id, Prompt: prompt, MaxTokens: maxTokens}); err != nil {
		t.Fatalf("add %s: %v", id, err)
	}
}

func hashesOf(tokens []uint32, bs int) ([]kv.LocalBlockHash, []kv.SequenceHash) {
	local := hashing.BlockHashes(tokens, bs, hashing.Options{})
	return local, hashing.SequenceHashes(local)
}

func TestPrefillStoresPromptBlocksInOneEvent(t *testing.T) {
	r, rec := newTestRank(t, smallConfig(4, 64))
	prompt := seqTokens(100, 42) // 10 full blocks and 2 spare tokens
	mustAdd(t, r, "a", prompt, 1)
	drain(t, r)
	evs := rec.take()
	if len(evs) != 1 {
		t.Fatalf("want one stored event, got %+v", evs)
	}
	ev := evs[0]
	local, seq := hashesOf(prompt, 4)
	if ev.Kind != kv.EventStored || ev.HasParent || ev.EventID != 0 || ev.Worker != (kv.WorkerWithDpRank{WorkerID: 7}) || ev.Tier != kv.TierDevice {
		t.Fatalf("unexpected event header %+v", ev)
	}
	if len(ev.Blocks) != 10 {
		t.Fatalf("want 10 blocks, got %d", len(ev.Blocks))
	}
	for i, b := range ev.Blocks {
		if b.BlockHash != kv.ExternalBlockHash(seq[i]) || b.TokensHash != local[i] {
			t.Fatalf("block %d: got %+v, want seq %d local %d", i, b, seq[i], local[i])
		}
	}
}

func TestChunkedPrefillStoresEachChunkUnderItsParent(t *testing.T) {
	cfg := smallConfig(4, 64)
	cfg.MaxNumBatchedTokens = 8
	r, rec := newTestRank(t, cfg)
	prompt := seqTokens(1, 20)
	mustAdd(t, r, "a", prompt, 1)
	_, seq := hashesOf(prompt, 4)
	want := []struct {
		hasParent bool
		parent    kv.SequenceHash
		blocks    []kv.SequenceHash
	}{
		{false, 0, seq[0:2]},
		{true, seq[1], seq[2:4]},
		{true, seq[3], seq[4:5]},
	}
	for step, w := range want {
		outs, ok := r.Step()
		if !ok {
			t.Fatalf("step %d: rank idle", step)
		}
		if gotTok := len(outs) > 0; gotTok != (step == 2) {
			t.Fatalf("step %d: first token emitted=%v", step, gotTok)
		}
		evs := rec.take()
		if len(evs) != 1 || evs[0].EventID != uint64(step) {
			t.Fatalf("step %d: want one event with id %d, got %+v", step, step, evs)
		}
		ev := evs[0]
		if ev.HasParent != w.hasParent || ev.ParentHash != kv.ExternalBlockHash(w.parent) {
			t.Fatalf("step %d: parent %v/%d, want %v/%d", step, ev.HasParent, ev.ParentHash, w.hasParent, w.parent)
		}
		var got []kv.SequenceHash
		for _, b := range ev.Blocks {
			got = append(got, kv.SequenceHash(b.BlockHash))
		}
		if !slices.Equal(got, w.blocks) {
			t.Fatalf("step %d: blocks %v, want %v", step, got, w.blocks)
		}
	}
}

func TestOutputBlocksAreCachedUnderPromptPlusOutput(t *testing.T) {
	r, rec := newTestRank(t, smallConfig(4, 64))
	prompt := seqTokens(5, 6)
	mustAdd(t, r, "a", prompt, 8)
	outs := drain(t, r)["a"]
	gen := GeneratedTokens(prompt, 8)
	for i, o := range outs {
		if o.Token != gen[i] || o.Index != i {
			t.Fatalf("token %d: got %d, want %d", i, o.Token, gen[i])
		}
	}
	if len(outs) != 8 || !outs[7].Finished {
		t.Fatalf("want 8 tokens ending finished, got %+v", outs)
	}
	// 6 prompt + 7 fed-back tokens = 13 computed tokens: 3 full blocks.
	all := append(slices.Clone(prompt), gen...)
	_, seq := hashesOf(all[:12], 4)
	var stored []kv.SequenceHash
	for _, ev := range rec.take() {
		for _, b := range ev.Blocks {
			stored = append(stored, kv.SequenceHash(b.BlockHash))
		}
	}
	if !slices.Equal(stored, seq) {
		t.Fatalf("stored %v, want %v", stored, seq)
	}
}

func TestPrefixHitCutsTimeToFirstToken(t *testing.T) {
	cfg := DefaultConfig() // 20k prefill tok/s, 10 ms step base
	shared := seqTokens(1000, 2000)
	warm, _ := newTestRank(t, cfg)
	mustAdd(t, warm, "first", shared, 1)
	cold := drain(t, warm)["first"][0]
	mustAdd(t, warm, "second", append(slices.Clone(shared), seqTokens(9000, 16)...), 1)
	hit := drain(t, warm)["second"][0]

	coldTTFT, hitTTFT := cold.At-cold.Arrived, hit.At-hit.Arrived
	if hit.CachedTokens != 2000 || cold.CachedTokens != 0 {
		t.Fatalf("cached tokens: cold %d hit %d", cold.CachedTokens, hit.CachedTokens)
	}
	// Cold: 10 ms + 2000/20000 s = 110 ms. Hit: 10 ms + 16 tokens.
	if coldTTFT != 110*time.Millisecond {
		t.Fatalf("cold TTFT %v, want 110ms", coldTTFT)
	}
	if hitTTFT > 11*time.Millisecond {
		t.Fatalf("hit TTFT %v, want about 10.8ms", hitTTFT)
	}
	st := warm.Stats()
	if st.PrefixQueries != 4016 || st.PrefixHits != 2000 {
		t.Fatalf("prefix stats %d/%d, want 2000/4016", st.PrefixHits, st.PrefixQueries)
	}
}

func TestFullyCachedPromptRecomputesItsLastBlock(t *testing.T) {
	r, rec := newTestRank(t, smallConfig(4, 64))
	prompt := seqTokens(1, 16)
	mustAdd(t, r, "a", prompt, 1)
	drain(t, r)
	rec.take()
	mustAdd(t, r, "b", prompt, 1)
	out := drain(t, r)["b"][0]
	if out.CachedTokens != 12 {
		t.Fatalf("cached %d, want 12 (last block recomputed)", out.CachedTokens)
	}
	if evs := rec.take(); len(evs) != 0 {
		t.Fatalf("recomputed block already cached must not be stored again: %+v", evs)
	}
	if st := r.Stats(); st.CachedBlocks != 4 || st.UsedBlocks != 0 {
		t.Fatalf("want 4 cached, 0 used blocks; got %+v", st)
	}
}

func TestEvictionIsLeastRecentlyUsedTailFirst(t *testing.T) {
	r, rec := newTestRank(t, smallConfig(4, 6))
	a, b := seqTokens(100, 8), seqTokens(200, 8)
	_, ha := hashesOf(a, 4)
	_, hb := hashesOf(b, 4)
	mustAdd(t, r, "a", a, 1)
	drain(t, r)
	mustAdd(t, r, "b", b, 1)
	drain(t, r)
	rec.take()
	// 4 cached, 2 free. Each new 8-token prompt needs 2 blocks.
	wantRemoved := [][]kv.SequenceHash{nil, {ha[1], ha[0]}, {hb[1], hb[0]}}
	for i, want := range wantRemoved {
		mustAdd(t, r, "c"+string(rune('0'+i)), seqTokens(1000*(i+1), 8), 1)
		drain(t, r)
		var removed []kv.SequenceHash
		for _, ev := range rec.take() {
			if ev.Kind == kv.EventRemoved {
				for _, h := range ev.Removed {
					removed = append(removed, kv.SequenceHash(h))
				}
			}
		}
		if !slices.Equal(removed, want) {
			t.Fatalf("request %d: removed %v, want %v", i, removed, want)
		}
	}
}

func TestReferencedBlocksAreNeverEvicted(t *testing.T) {
	r, rec := newTestRank(t, smallConfig(4, 6))
	long := seqTokens(1, 12) // 3 blocks, grows to 5 with output
	mustAdd(t, r, "long", long, 8)
	_, hl := hashesOf(long, 4)
	first, _ := r.Step()                        // prefill: long holds 3 blocks
	mustAdd(t, r, "big", seqTokens(500, 16), 1) // needs 4 blocks: must wait
	second, _ := r.Step()
	if st := r.Stats(); st.Waiting != 1 || st.Running != 1 {
		t.Fatalf("big should wait while long holds blocks: %+v", st)
	}
	outs := drain(t, r)
	outs["long"] = append(append(first, second...), outs["long"]...)
	if len(outs["long"]) != 8 || len(outs["big"]) != 1 {
		t.Fatalf("both must finish: long %d big %d tokens", len(outs["long"]), len(outs["big"]))
	}
	// long's blocks can only have gone after it finished, i.e. after its
	// last token (the batch producing big's first token comes later).
	for _, ev := range rec.take() {
		for _, h := range ev.Removed {
			if slices.Contains(hl, kv.SequenceHash(h)) && outs["big"][0].At <= outs["long"][7].At {
				t.Fatalf("block %d of running request evicted", h)
			}
		}
	}
}

func TestIdenticalConcurrentPromptsAreCachedOnce(t *testing.T) {
	r, rec := newTestRank(t, smallConfig(4, 64))
	p := seqTokens(1, 16)
	mustAdd(t, r, "a", p, 1)
	mustAdd(t, r, "b", p, 1)
	drain(t, r)
	stored := 0
	for _, ev := range rec.take() {
		stored += len(ev.Blocks)
	}
	if stored != 4 || r.Stats().CachedBlocks != 4 {
		t.Fatalf("stored %d blocks, cached %d; want 4 each", stored, r.Stats().CachedBlocks)
	}
}

func TestAbortReleasesBlocks(t *testing.T) {
	cfg := smallConfig(4, 64)
	cfg.MaxNumSeqs = 1
	r, _ := newTestRank(t, cfg)
	mustAdd(t, r, "a", seqTokens(1, 40), 100)
	mustAdd(t, r, "queued", seqTokens(900, 8), 1)
	r.Step()
	if r.Stats().UsedBlocks == 0 {
		t.Fatal("running request should hold blocks")
	}
	if !r.Abort("a") || !r.Abort("queued") || r.Abort("a") {
		t.Fatal("abort should report known requests once")
	}
	if st := r.Stats(); st.UsedBlocks != 0 || st.Running != 0 || st.Waiting != 0 || !r.Idle() {
		t.Fatalf("abort left state behind: %+v", st)
	}
	if st := r.Stats(); st.CachedBlocks != 10 {
		t.Fatalf("computed prompt blocks stay cached: %d", st.CachedBlocks)
	}
}

func TestAbortBetweenScheduleAndCompleteSkipsRequest(t *testing.T) {
	r, rec := newTestRank(t, smallConfig(4, 64))
	mustAdd(t, r, "a", seqTokens(1, 40), 4)
	b, err := r.Schedule()
	if err != nil || b == nil {
		t.Fatalf("schedule: %v %v", b, err)
	}
	if _, err := r.Schedule(); !errors.Is(err, ErrBatchInFlight) {
		t.Fatalf("second schedule: %v", err)
	}
	r.Abort("a")
	outs, err := r.Complete(b)
	if err != nil || len(outs) != 0 || len(rec.take()) != 0 {
		t.Fatalf("aborted request must produce nothing: %v %v", outs, err)
	}
	if _, err := r.Complete(b); !errors.Is(err, ErrForeignBatch) {
		t.Fatalf("completing twice: %v", err)
	}
	if r.Stats().UsedBlocks != 0 {
		t.Fatal("blocks leaked")
	}
}

func TestPreemptionUnderDecodePressureStillFinishesCorrectly(t *testing.T) {
	r, _ := newTestRank(t, smallConfig(4, 8))
	pa, pb := seqTokens(1, 8), seqTokens(100, 8)
	mustAdd(t, r, "a", pa, 20) // alone: 27 tokens, 7 blocks
	mustAdd(t, r, "b", pb, 20)
	outs := drain(t, r)
	if r.Stats().Preemptions == 0 {
		t.Fatal("two requests of 7 blocks in 8 must preempt")
	}
	for id, p := range map[string][]uint32{"a": pa, "b": pb} {
		var got []uint32
		for _, o := range outs[id] {
			got = append(got, o.Token)
		}
		if !slices.Equal(got, GeneratedTokens(p, 20)) {
			t.Fatalf("%s: tokens %v differ from the deterministic completion", id, got)
		}
	}
	if st := r.Stats(); st.UsedBlocks != 0 || st.FinishedRequests != 2 {
		t.Fatalf("after drain: %+v", st)
	}
}

func TestAddRejectsBadRequests(t *testing.T) {
	r, _ := newTestRank(t, smallConfig(4, 4))
	mustAdd(t, r, "dup", seqTokens(1, 4), 1)
	tests := []struct {
		name string
		req  Request
		want error
	}{
		{"empty prompt", Request{ID: "x", MaxTokens: 1}, ErrEmptyPrompt},
		{"zero max tokens", Request{ID: "x", Prompt: seqTokens(1, 4)}, ErrBadMaxTokens},
		{"duplicate id", Request{ID: "dup", Prompt: seqTokens(1, 4), MaxTokens: 1}, ErrDuplicateRequest},
		{"too large", Request{ID: "x", Prompt: seqTokens(1, 16), MaxTokens: 2}, ErrRequestTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := r.Add(tt.req); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
	// Exactly the capacity fits: 16 prompt + 1 output token, last never fed back.
	mustAdd(t, r, "fits", seqTokens(1, 16), 1)
}

func TestResetPrefixCache(t *testing.T) {
	r, rec := newTestRank(t, smallConfig(4, 64))
	mustAdd(t, r, "a", seqTokens(1, 16), 3)
	r.Step()
	if err := r.ResetPrefixCache(); !errors.Is(err, ErrCacheInUse) {
		t.Fatalf("reset while running: %v", err)
	}
	drain(t, r)
	rec.take()
	if err := r.ResetPrefixCache(); err != nil {
		t.Fatal(err)
	}
	evs := rec.take()
	if len(evs) != 1 || evs[0].Kind != kv.EventCleared || r.Stats().CachedBlocks != 0 {
		t.Fatalf("want one cleared event and an empty cache, got %+v", evs)
	}
	mustAdd(t, r, "b", seqTokens(1, 16), 1)
	if out := drain(t, r)["b"][0]; out.CachedTokens != 0 {
		t.Fatalf("cache hit after reset: %d", out.CachedTokens)
	}
}

func TestDecodeStepTimeGrowsWithBatch(t *testing.T) {
	cfg := DefaultConfig()
	r, _ := newTestRank(t, cfg)
	for i := range 64 {
		mustAdd(t, r, string(rune('A'+i)), seqTokens(i*100, 10), 3)
	}
	r.Step() // all prefills
	b, err := r.Schedule()
	if err != nil {
		t.Fatal(err)
	}
	if b.DecodeSeqs != 64 || b.PrefillTokens != 0 || b.Duration != cfg.StepBaseTime+64*cfg.DecodeTimePerSeq {
		t.Fatalf("decode batch %+v", b)
	}
}

func TestMaxNumSeqsBoundsRunning(t *testing.T) {
	cfg := smallConfig(4, 256)
	cfg.MaxNumSeqs = 2
	r, _ := newTestRank(t, cfg)
	for _, id := range []string{"a", "b", "c"} {
		mustAdd(t, r, id, seqTokens(len(id)*50, 4), 5)
	}
	r.Step()
	if st := r.Stats(); st.Running != 2 || st.Waiting != 1 {
		t.Fatalf("want 2 running 1 waiting, got %+v", st)
	}
}

func TestRankIsDeterministic(t *testing.T) {
	run := func() ([]kv.Event, map[string][]Output) {
		r, rec := newTestRank(t, smallConfig(4, 10))
		for i := range 6 {
			mustAdd(t, r, string(rune('a'+i)), seqTokens(i%3*50, 9+i), 7)
		}
		outs := drain(t, r)
		return rec.take(), outs
	}
	e1, o1 := run()
	e2, o2 := run()
	if len(e1) != len(e2) || len(o1) != len(o2) {
		t.Fatal("runs differ in size")
	}
	for i := range e1 {
		if e1[i].EventID != e2[i].EventID || e1[i].Kind != e2[i].Kind || !slices.Equal(e1[i].Blocks, e2[i].Blocks) || !slices.Equal(e1[i].Removed, e2[i].Removed) {
			t.Fatalf("event %d differs: %+v vs %+v", i, e1[i], e2[i])
		}
	}
	for id := range o1 {
		if !slices.Equal(o1[id], o2[id]) {
			t.Fatalf("outputs of %s differ", id)
		}
	}
}
