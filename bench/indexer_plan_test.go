package bench

import (
	"errors"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/kv"
)

func TestIndexerPlannerStoresExtendsAndEvicts(t *testing.T) {
	p, err := NewIndexerPlanner(IndexerPlanConfig{Workers: 1, BlockSize: 256, CapacityBlocks: 6})
	if err != nil {
		t.Fatal(err)
	}
	a := TraceRecord{InputLength: 1024, HashIDs: []uint64{0, 1}}
	b := TraceRecord{InputLength: 1024, HashIDs: []uint64{0, 2}}
	c := TraceRecord{InputLength: 700, HashIDs: []uint64{3, 4}} // 2 full router blocks

	sa, err := p.Step(a)
	if err != nil {
		t.Fatal(err)
	}
	seqA := chain(t, p, a)
	if len(sa.Events) != 1 || sa.Events[0].Kind != kv.EventStored || sa.Events[0].HasParent || len(sa.Events[0].Blocks) != 4 {
		t.Fatalf("first request: %+v", sa.Events)
	}
	for i, blk := range sa.Events[0].Blocks {
		if blk.BlockHash != kv.ExternalBlockHash(seqA[i]) {
			t.Fatalf("block %d engine hash is not its sequence hash", i)
		}
	}

	sb, _ := p.Step(b)
	st := sb.Events[0]
	if len(sb.Events) != 1 || !st.HasParent || st.ParentHash != kv.ExternalBlockHash(seqA[1]) || len(st.Blocks) != 2 {
		t.Fatalf("second request should extend the shared 2-block prefix: %+v", st)
	}

	sc, _ := p.Step(c)
	if len(sc.Events) != 2 || sc.Events[0].Kind != kv.EventRemoved || sc.Events[1].Kind != kv.EventStored {
		t.Fatalf("third request: want removed then stored, got %+v", sc.Events)
	}
	// The least recently used blocks are request a's own tail (its leaves),
	// not the prefix it shares with b.
	want := []kv.ExternalBlockHash{kv.ExternalBlockHash(seqA[3]), kv.ExternalBlockHash(seqA[2])}
	if !slices.Equal(sc.Events[0].Removed, want) {
		t.Fatalf("evicted %v, want a's leaves %v", sc.Events[0].Removed, want)
	}
	if sc.Blocks != 2 || len(sc.Events[1].Blocks) != 2 {
		t.Fatalf("700 tokens at block size 256 should be 2 blocks, got %d", sc.Blocks)
	}
	if sc.Events[1].EventID <= sc.Events[0].EventID || sc.Events[0].EventID <= sb.Events[0].EventID {
		t.Fatal("event ids do not increase")
	}
}

func TestIndexerPlannerSpreadsAndCaps(t *testing.T) {
	p, _ := NewIndexerPlanner(IndexerPlanConfig{Workers: 2, BlockSize: 512, CapacityBlocks: 2})
	r := TraceRecord{InputLength: 1536, HashIDs: []uint64{7, 8, 9}}
	s1, _ := p.Step(r)
	s2, _ := p.Step(r)
	s3, _ := p.Step(r)
	if s1.Worker != WorkerID(0) || s2.Worker != WorkerID(1) || s3.Worker != WorkerID(0) {
		t.Fatalf("workers %v %v %v, want round robin", s1.Worker, s2.Worker, s3.Worker)
	}
	if len(s1.Events[0].Blocks) != 2 {
		t.Fatalf("a 3-block prompt on a 2-block cache stored %d blocks", len(s1.Events[0].Blocks))
	}
	if len(s3.Events) != 0 {
		t.Fatalf("a repeat of a cached prompt published %+v", s3.Events)
	}
}

func TestIndexerPlanConfigValidate(t *testing.T) {
	for _, c := range []IndexerPlanConfig{
		{Workers: 0, BlockSize: 16, CapacityBlocks: 1},
		{Workers: 1, BlockSize: 48, CapacityBlocks: 1},
		{Workers: 1, BlockSize: 16, CapacityBlocks: 0},
	} {
		if _, err := NewIndexerPlanner(c); !errors.Is(err, ErrBadIndexerPlan) {
			t.Errorf("%+v: got %v", c, err)
		}
	}
}

func chain(t *testing.T, p *IndexerPlanner, r TraceRecord) []kv.SequenceHash {
	t.Helper()
	toks, err := NewTraceSynth().Tokens(r)
	if err != nil {
		t.Fatal(err)
	}
	local, err := p.LocalHashes(r)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(local, hashing.BlockHashes(toks, p.cfg.BlockSize, hashing.Options{})) {
		t.Fatal("planner hashes differ from hashing the synthesized prompt")
	}
	return hashing.SequenceHashes(local)
}
