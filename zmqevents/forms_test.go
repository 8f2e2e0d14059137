package zmqevents

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/kv"
)

// formSubscriber is a subscriber without sockets whose handler records the
// index events and whose log is kept, for feeding batches to deliver.
type formSubscriber struct {
	*Subscriber
	mu    sync.Mutex
	got   []kv.Event
	drops map[string]int // what OnDrop was told
	log   bytes.Buffer
}

func newFormSubscriber(t *testing.T) *formSubscriber {
	t.Helper()
	f := &formSubscriber{drops: map[string]int{}}
	opts, err := Options{BlockSize: 4, OnDrop: func(reason string) { f.drops[reason]++ }, Logger: slog.New(slog.NewTextHandler(&f.log, nil)), Handler: func(ev *kv.Event) {
		f.mu.Lock()
		defer f.mu.Unlock()
		c := *ev
		c.Blocks, c.Removed = append([]kv.StoredBlock(nil), ev.Blocks...), append([]kv.ExternalBlockHash(nil), ev.Removed...)
		f.got = append(f.got, c)
	}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	f.Subscriber = &Subscriber{cfg: WorkerEndpoint{WorkerID: 7}, opts: opts, conv: Converter{BlockSize: 4},
		refs: NewRefCounter(), log: opts.Logger.With("worker_id", 7)}
	return f
}

// feed decodes a msgpack batch and delivers it as rank 1's batch seq.
func (f *formSubscriber) feed(t *testing.T, payload []byte, seq uint64) {
	t.Helper()
	b, err := DecodeBatch(payload)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	f.deliver(&Message{Seq: seq, Batch: b}, 1)
}

// pack encodes with the msgpack library, not this package's encoder.
func pack(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (f *formSubscriber) wantLog(t *testing.T, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(f.log.String(), p) {
			t.Fatalf("log lacks %q:\n%s", p, f.log.String())
		}
	}
}

func stored(hash uint64, tokens ...any) []any {
	return []any{"BlockStored", []any{hash}, nil, tokens, 4, nil, "GPU", nil}
}

// A type a newer engine adds is skipped and counted; the batch's other
// events are applied, in both event encodings.
func TestUnknownEventTypeSkippedRestApplied(t *testing.T) {
	for _, form := range []struct {
		name    string
		unknown any
	}{
		{"tagged array", []any{"BlockMoved", []any{1}, "CPU", map[string]any{"x": 1}}},
		{"map", map[string]any{"type": "BlockMoved", "block_hashes": []any{1}, "to": "CPU"}},
	} {
		t.Run(form.name, func(t *testing.T) {
			f := newFormSubscriber(t)
			f.feed(t, pack(t, []any{1.0, []any{stored(9, 1, 2, 3, 4), form.unknown, []any{"BlockRemoved", []any{9}, "GPU"}}, 1}), 5)
			if len(f.got) != 2 || f.got[0].Kind != kv.EventStored || f.got[1].Kind != kv.EventRemoved {
				t.Fatalf("applied %+v, want the store and the removal", f.got)
			}
			st := f.Stats()
			if st.Reasons[ReasonUnknownEventType] != 1 || st.Malformed != 1 {
				t.Fatalf("stats %+v", st)
			}
			f.wantLog(t, "level=WARN", "worker_id=7", "dp_rank=1", "reason=unknown_event_type", "type=BlockMoved")
			if f.drops["unknown_event_type"] != 1 || len(f.drops) != 1 {
				t.Fatalf("OnDrop heard %v", f.drops)
			}
		})
	}
}

// A block size other than the router's is counted under its reason and
// logged with both sizes; a one-block event of a smaller size from a rank
// that never stored a full block is the same mismatch, not a short page.
func TestBlockSizeMismatchCountedAndLogged(t *testing.T) {
	f := newFormSubscriber(t)
	big := []any{"BlockStored", []any{1}, nil, []any{1, 2, 3, 4, 5, 6, 7, 8}, 8, nil, "GPU", nil}
	small := []any{"BlockStored", []any{2}, nil, []any{1, 2}, 2, nil, "GPU", nil}
	f.feed(t, pack(t, []any{1.0, []any{big, small}}), 1)
	if len(f.got) != 0 {
		t.Fatalf("indexed %+v", f.got)
	}
	if st := f.Stats(); st.Reasons[ReasonBlockSizeMismatch] != 2 || st.Reasons[ReasonShortLastPage] != 0 || st.Malformed != 2 {
		t.Fatalf("stats %+v", st)
	}
	f.wantLog(t, "level=WARN", "reason=block_size_mismatch", "expected_block_size=4", "seen_block_size=8", "dp_rank=1")
}

// vLLM's block pool puts the adapter name first in every block's
// extra_keys (generate_block_hash_extra_keys: lora keys, then MM keys,
// then the cache salt on block 0) and, since lora_name exists, in
// lora_name. The router hashes a request for that adapter with the
// adapter name as salt and no extra keys (actors/route.go:
// hashing.Options{LoraName: lora}); the stored blocks must hash the same.
func TestLoRABlockPoolShapeHashesAsTheRouter(t *testing.T) {
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	adapter := hashing.BlockHashes(tokens, 4, hashing.Options{LoraName: "sql"})
	base := hashing.BlockHashes(tokens, 4, hashing.Options{})
	toks := []any{1, 2, 3, 4, 5, 6, 7, 8}
	for _, tt := range []struct {
		name  string
		event any
	}{
		{"array, lora_name and extra_keys", []any{"BlockStored", []any{11, 12}, nil, toks, 4, 3, "GPU", "sql", []any{[]any{"sql"}, []any{"sql"}}}},
		{"map, lora_name and extra_keys", map[string]any{"type": "BlockStored", "block_hashes": []any{11, 12}, "parent_block_hash": nil,
			"token_ids": toks, "block_size": 4, "lora_id": 3, "medium": "GPU", "lora_name": "sql",
			"extra_keys": []any{[]any{"sql"}, []any{"sql"}}, "group_idx": 0}},
		{"lora_name before extra_keys existed", []any{"BlockStored", []any{11, 12}, nil, toks, 4, 3, "GPU", "sql"}},
		{"lora_id and extra_keys without lora_name", []any{"BlockStored", []any{11, 12}, nil, toks, 4, 3, "GPU", nil, []any{[]any{"sql"}, []any{"sql"}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFormSubscriber(t)
			f.feed(t, pack(t, []any{1.0, []any{tt.event}}), 1)
			if len(f.got) != 1 || len(f.got[0].Blocks) != 2 {
				t.Fatalf("applied %+v (stats %+v)", f.got, f.Stats())
			}
			for i, b := range f.got[0].Blocks {
				if b.TokensHash != adapter[i] {
					t.Fatalf("block %d hashes to %x, the router's adapter query to %x (base %x)", i, b.TokensHash, adapter[i], base[i])
				}
			}
			if st := f.Stats(); st.Reasons != ([NumReasons]uint64{}) {
				t.Fatalf("stats %+v", st)
			}
		})
	}
	// The cache salt after the name still keys block 0, as in vLLM; block
	// 1 has the name only.
	f := newFormSubscriber(t)
	f.feed(t, pack(t, []any{1.0, []any{[]any{"BlockStored", []any{11, 12}, nil, toks, 4, 3, "GPU", "sql",
		[]any{[]any{"sql", "tenant"}, []any{"sql"}}}}}), 1)
	if len(f.got) != 1 || f.got[0].Blocks[0].TokensHash == adapter[0] || f.got[0].Blocks[1].TokensHash != adapter[1] {
		t.Fatalf("salted: %+v, adapter %x", f.got, adapter)
	}
	// A base-model block whose only extra key is a cache salt keeps it.
	f = newFormSubscriber(t)
	f.feed(t, pack(t, []any{1.0, []any{[]any{"BlockStored", []any{11}, nil, []any{1, 2, 3, 4}, 4, nil, "GPU", nil, []any{[]any{"sql"}}}}}), 1)
	if len(f.got) != 1 || f.got[0].Blocks[0].TokensHash == base[0] || f.got[0].Blocks[0].TokensHash == adapter[0] {
		t.Fatalf("salted base block %+v", f.got)
	}
}

// lora_id with no adapter name anywhere (vLLM before lora_name) must not
// be indexed as base-model blocks: it goes under a namespace no query
// hashes to, counted and logged.
func TestLoraIDWithoutNameIsNotBaseModel(t *testing.T) {
	f := newFormSubscriber(t)
	f.feed(t, pack(t, []any{1.0, []any{[]any{"BlockStored", []any{11}, nil, []any{1, 2, 3, 4}, 4, 3, "GPU"}}}), 1)
	base := hashing.BlockHashes([]uint32{1, 2, 3, 4}, 4, hashing.Options{})
	if len(f.got) != 1 || f.got[0].Blocks[0].TokensHash == base[0] {
		t.Fatalf("lora_id-only block indexed as %+v, base hash %x", f.got, base)
	}
	want := hashing.BlockHashes([]uint32{1, 2, 3, 4}, 4, hashing.Options{LoraName: LoraIDNamespace(3)})
	if f.got[0].Blocks[0].TokensHash != want[0] {
		t.Fatalf("got %x want the lora_id namespace %x", f.got[0].Blocks[0].TokensHash, want[0])
	}
	if st := f.Stats(); st.Reasons[ReasonLoraIDWithoutName] != 1 || st.Malformed != 0 {
		t.Fatalf("stats %+v", st)
	}
	f.wantLog(t, "level=WARN", "reason=lora_id_without_name", "lora_id=3", "dp_rank=1")
}

// SGLang's EAGLE pages carry (token, next token) pairs. Dynamo's decoder
// (dynamo-kv-router zmq_wire.rs, test_deserialize_bigram_block_stored_
// sequence) reads [(10,11),(11,12),(12,13),(13,14)] as tokens 10..13 plus
// 14; the blocks are the first tokens, hashed as the router hashes a
// prompt.
func TestEAGLEPairsDecodeToTheBlockTokens(t *testing.T) {
	pairs := []any{[]any{10, 11}, []any{11, 12}, []any{12, 13}, []any{13, 14}}
	b, err := DecodeBatch(pack(t, []any{1.0, []any{[]any{"BlockStored", []any{11}, nil, pairs, 4, nil, "GPU"}}}))
	if err != nil {
		t.Fatal(err)
	}
	ev := b.Events[0]
	if !ev.Bigram || ev.NextToken != 14 || len(ev.TokenIDs) != 4 || ev.TokenIDs[0] != 10 || ev.TokenIDs[3] != 13 {
		t.Fatalf("decoded %+v", ev)
	}
	f := newFormSubscriber(t)
	f.feed(t, pack(t, []any{1.0, []any{map[string]any{"type": "BlockStored", "block_hashes": []any{11},
		"parent_block_hash": nil, "token_ids": pairs, "block_size": 4}}}), 1)
	want := hashing.BlockHashes([]uint32{10, 11, 12, 13}, 4, hashing.Options{})
	if len(f.got) != 1 || f.got[0].Blocks[0].TokensHash != want[0] {
		t.Fatalf("applied %+v, want hash %x (stats %+v)", f.got, want, f.Stats())
	}
	for name, bad := range map[string][]any{
		"pairs that do not chain": {[]any{10, 11}, []any{12, 13}, []any{13, 14}, []any{14, 15}},
		"a triple":                {[]any{10, 11, 12}, []any{11, 12}, []any{12, 13}, []any{13, 14}},
		"mixed ids and pairs":     {10, []any{11, 12}, []any{12, 13}, []any{13, 14}},
	} {
		_, err := DecodeBatch(pack(t, []any{1.0, []any{[]any{"BlockStored", []any{11}, nil, bad, 4, nil, "GPU"}}}))
		if !errors.Is(err, ErrBadTokenIDs) || ReasonOf(err) != ReasonBadTokenIDs {
			t.Errorf("%s: %v, want bad_token_ids", name, err)
		}
	}
}

// SGLang's _record_store_event sends one BlockStored per page, with
// block_size the page's own length, so a radix node ends with a short
// page. It is skipped under its own reason, not counted as malformed;
// a real malformation next to it still is.
func TestSGLangShortLastPage(t *testing.T) {
	f := newFormSubscriber(t)
	page := func(hash uint64, parent any, tokens ...any) []any {
		return []any{"BlockStored", []any{hash}, parent, tokens, len(tokens), nil, "GPU"}
	}
	f.feed(t, pack(t, []any{1.0, []any{page(1, nil, 1, 2, 3, 4), page(2, 1, 5, 6, 7, 8), page(3, 2, 9, 10)}}), 1)
	if len(f.got) != 2 {
		t.Fatalf("applied %+v", f.got)
	}
	if st := f.Stats(); st.Reasons[ReasonShortLastPage] != 1 || st.Malformed != 0 {
		t.Fatalf("stats %+v", st)
	}
	// EAGLE pages end short the same way.
	f.feed(t, pack(t, []any{1.0, []any{page(4, 2, []any{9, 10}, []any{10, 11})}}), 2)
	// Tokens that do not cover the blocks are malformed.
	f.feed(t, pack(t, []any{1.0, []any{[]any{"BlockStored", []any{5, 6}, 2, []any{1, 2, 3, 4, 5}, 4, nil, "GPU"}}}), 3)
	if st := f.Stats(); st.Reasons[ReasonShortLastPage] != 2 || st.Reasons[ReasonBadTokenIDs] != 1 || st.Malformed != 1 {
		t.Fatalf("stats %+v", st)
	}
	f.wantLog(t, "reason=short_last_page", "reason=bad_token_ids")
}

// Media Dynamo names are scored as Dynamo scores them; an unknown one is
// skipped and counted, not scored as disk.
func TestMediaMappedOrRefused(t *testing.T) {
	f := newFormSubscriber(t)
	ev := func(hash uint64, medium string) []any {
		return []any{"BlockStored", []any{hash}, nil, []any{1, 2, 3, 4}, 4, nil, medium, nil}
	}
	f.feed(t, pack(t, []any{1.0, []any{ev(1, "CPU_PINNED"), ev(2, "CPU_TIER1"), ev(3, "EXTERNAL"), ev(4, "TAPE")}}), 1)
	want := []kv.StorageTier{kv.TierHostPinned, kv.TierHostPinned, kv.TierDisk}
	if len(f.got) != len(want) {
		t.Fatalf("applied %+v", f.got)
	}
	for i, w := range want {
		if f.got[i].Tier != w {
			t.Errorf("event %d: tier %s, want %s", i, f.got[i].Tier, w)
		}
	}
	if st := f.Stats(); st.Reasons[ReasonUnknownMedium] != 1 {
		t.Fatalf("stats %+v", st)
	}
	f.wantLog(t, "level=WARN", "reason=unknown_medium", "medium=TAPE")
}

// AllBlocksCleared from one rank clears that rank on every tier and no
// other: the ref counts of the other rank survive (its repeated store is
// a duplicate), the cleared rank's are forgotten (its store passes).
func TestAllBlocksClearedClearsOnlyItsRank(t *testing.T) {
	f := newFormSubscriber(t)
	cpu := []any{"BlockStored", []any{9}, nil, []any{1, 2, 3, 4}, 4, nil, "CPU"}
	for _, rank := range []int{0, 1} {
		f.feed(t, pack(t, []any{1.0, []any{cpu}, rank}), 1)
	}
	f.got = nil
	f.feed(t, pack(t, []any{1.0, []any{[]any{"AllBlocksCleared"}}, 1}), 2)
	if len(f.got) != int(kv.NumTiers) {
		t.Fatalf("cleared %+v, want one Cleared per tier", f.got)
	}
	for _, ev := range f.got {
		if ev.Kind != kv.EventCleared || ev.Worker != (kv.WorkerWithDpRank{WorkerID: 7, DpRank: 1}) {
			t.Fatalf("cleared %+v, want rank 1 only", f.got)
		}
	}
	f.got = nil
	for _, rank := range []int{0, 1} {
		f.feed(t, pack(t, []any{1.0, []any{cpu}, rank}), 3)
	}
	if len(f.got) != 1 || f.got[0].Worker.DpRank != 1 || f.got[0].Tier != kv.TierHostPinned {
		t.Fatalf("after the clear: %+v, want rank 1's store only (rank 0 still holds its copy)", f.got)
	}
}

// A LoRA event whose extra_keys do not start with the adapter name (a
// layout vLLM does not send today, such as typed keys) is indexed with
// the keys it has, and counted, so a format change is not silent.
func TestLoraNameNotInExtraKeysIsCounted(t *testing.T) {
	f := newFormSubscriber(t)
	typed := map[string]any{"kind": "lora", "name": "sql"}
	f.feed(t, pack(t, []any{1.0, []any{[]any{"BlockStored", []any{11}, nil, []any{1, 2, 3, 4}, 4, 3, "GPU", "sql", []any{[]any{typed}}}}}), 1)
	adapter := hashing.BlockHashes([]uint32{1, 2, 3, 4}, 4, hashing.Options{LoraName: "sql"})
	if len(f.got) != 1 || f.got[0].Blocks[0].TokensHash == adapter[0] {
		t.Fatalf("indexed %+v", f.got)
	}
	if st := f.Stats(); st.Reasons[ReasonLoraNameNotInExtraKeys] != 1 || st.Malformed != 0 {
		t.Fatalf("stats %+v", st)
	}
	f.wantLog(t, "level=WARN", "reason=lora_name_not_in_extra_keys", "lora_name=sql", "dp_rank=1")
}
