package zmqevents

import (
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/kv"
)

// unhex decodes a fixture written as commented hex: everything after a
// '#' on a line is a comment, whitespace is ignored.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		line, _, _ = strings.Cut(line, "#")
		b.WriteString(strings.Join(strings.Fields(line), ""))
	}
	out, err := hex.DecodeString(b.String())
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return out
}

// Fixtures written byte by byte from the msgpack spec and vLLM's structs.
const (
	// vLLM <= v0.23: array batch with dp_rank, tagged-array event with
	// the seven fields every release sends; a hash >= 2^63 is uint64.
	fixtureArray = `
93                              # batch: array of 3
cb 3ff8000000000000             # ts 1.5 (float64)
91                              # events: array of 1
98                              # event: array of 8
ab 426c6f636b53746f726564       # "BlockStored"
92 01 cf ffffffffffffffff       # block_hashes [1, 2^64-1]
c0                              # parent_block_hash nil
98 0102030405060708             # token_ids 1..8
04                              # block_size 4
c0                              # lora_id nil
a3 475055                       # medium "GPU"
c0                              # lora_name nil
00                              # data_parallel_rank 0
`
	// Old releases: no dp_rank, BlockStored with only four fields, a
	// negative int64 hash (builtin hash()), a 32-byte sha256 bin hash,
	// BlockRemoved with a negative int8 hash, AllBlocksCleared.
	fixtureLegacy = `
92                              # batch: array of 2 (no dp_rank)
cb 0000000000000000             # ts 0.0
93                              # events: array of 3
95                              # BlockStored with 4 fields
ab 426c6f636b53746f726564
92 d3 fffffffffffffffe          # block_hashes: int64 -2,
   c4 20 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f  # and a 32-byte bin
2a                              # parent_block_hash 42
98 0102030405060708             # token_ids
04                              # block_size
93                              # BlockRemoved
ac 426c6f636b52656d6f766564     # "BlockRemoved"
91 d0 9c                        # block_hashes [-100]
a3 435055                       # medium "CPU"
91                              # AllBlocksCleared, no fields
b0 416c6c426c6f636b73436c6561726564
`
	// Newest main (vLLM #42892 + EventBatch without array_like): maps at
	// both levels, "type" not first, a field this decoder does not know.
	fixtureMap = `
83                              # batch: map of 3
a2 7473 cb 3ff8000000000000     # "ts": 1.5
a6 6576656e7473 91              # "events": array of 1
8b                              # event: map of 11
ac 626c6f636b5f686173686573 91 07               # "block_hashes": [7]
a4 74797065 ab 426c6f636b53746f726564           # "type": "BlockStored"
b1 706172656e745f626c6f636b5f68617368 05        # "parent_block_hash": 5
a9 746f6b656e5f696473 94 0a0b0c0d               # "token_ids": [10,11,12,13]
aa 626c6f636b5f73697a65 04                      # "block_size": 4
a7 6c6f72615f6964 01                            # "lora_id": 1
a6 6d656469756d a3 475055                       # "medium": "GPU"
a9 6c6f72615f6e616d65 a5 6164617074             # "lora_name": "adapt"
aa 65787472615f6b657973 91 c0                   # "extra_keys": [None]
a9 67726f75705f696478 00                        # "group_idx": 0
b2 6b765f63616368655f737065635f6b696e64 ae 66756c6c5f617474656e74696f6e  # unknown: "full_attention"
b2 646174615f706172616c6c656c5f72616e6b 01      # "data_parallel_rank": 1
`
	// vLLM v0.26 as observed (kthena#1535): outer array, inner map, with
	// a per-block extra-keys tuple ("salt",) and an unknown trailing
	// batch element.
	fixtureV026 = `
94                              # batch: array of 4 (one unknown extra)
cb 3ff8000000000000             # ts
91                              # events
86                              # event: map of 6
a4 74797065 ab 426c6f636b53746f726564           # "type": "BlockStored"
ac 626c6f636b5f686173686573 91 09               # "block_hashes": [9]
b1 706172656e745f626c6f636b5f68617368 c0        # "parent_block_hash": nil
a9 746f6b656e5f696473 94 01020304               # "token_ids": [1,2,3,4]
aa 626c6f636b5f73697a65 04                      # "block_size": 4
aa 65787472615f6b657973 91 91 a4 73616c74       # "extra_keys": [("salt",)]
02                              # dp_rank 2
a3 787878                       # unknown extra element "xxx"
`
)

func TestDecodeBatchGolden(t *testing.T) {
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	tests := []struct {
		name    string
		fixture string
		want    Batch
	}{
		{"array encoding", fixtureArray, Batch{Timestamp: 1.5, HasDPRank: true, Events: []RawEvent{{
			Kind: kv.EventStored, BlockHashes: []uint64{1, ^uint64(0)}, TokenIDs: toks, BlockSize: 4, Medium: "GPU",
		}}}},
		{"legacy hashes and missing fields", fixtureLegacy, Batch{Events: []RawEvent{
			{Kind: kv.EventStored, BlockHashes: []uint64{0xfffffffffffffffe, 0x18191a1b1c1d1e1f}, HasParent: true,
				ParentHash: 42, TokenIDs: toks, BlockSize: 4},
			{Kind: kv.EventRemoved, BlockHashes: []uint64{uint64(1<<64 - 100)}, Medium: "CPU"},
			{Kind: kv.EventCleared},
		}}},
		{"map encoding", fixtureMap, Batch{Timestamp: 1.5, HasDPRank: true, DPRank: 1, Events: []RawEvent{{
			Kind: kv.EventStored, BlockHashes: []uint64{7}, HasParent: true, ParentHash: 5,
			TokenIDs: []uint32{10, 11, 12, 13}, BlockSize: 4, HasLoraID: true, LoraID: 1, Medium: "GPU",
			LoraName: "adapt", ExtraKeys: [][]uint64{nil}, HasGroup: true,
		}}}},
		{"v0.26 inner maps", fixtureV026, Batch{Timestamp: 1.5, HasDPRank: true, DPRank: 2, Events: []RawEvent{{
			Kind: kv.EventStored, BlockHashes: []uint64{9}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4,
			ExtraKeys: [][]uint64{{xxh3.Hash([]byte{0x91, 0xa4, 's', 'a', 'l', 't'})}},
			ExtraLead: []string{"salt"}, ExtraRest: [][]uint64{nil},
		}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeBatch(unhex(t, tt.fixture))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// The hand-written fixtures agree with an independent msgpack encoder.
func TestFixturesMatchMsgpackLibrary(t *testing.T) {
	toks := []any{1, 2, 3, 4, 5, 6, 7, 8}
	array, err := msgpack.Marshal([]any{1.5, []any{[]any{"BlockStored", []any{1, uint64(1<<64 - 1)}, nil, toks, 4, nil, "GPU", nil}}, 0})
	if err != nil {
		t.Fatal(err)
	}
	if want := unhex(t, fixtureArray); string(array) != string(want) {
		t.Fatalf("array fixture:\n got %x\nwant %x", want, array)
	}
	bin := make([]byte, 32)
	for i := range bin {
		bin[i] = byte(i)
	}
	legacy, err := msgpack.Marshal([]any{0.0, []any{
		[]any{"BlockStored", []any{int64(-2), bin}, 42, toks, 4},
		[]any{"BlockRemoved", []any{-100}, "CPU"},
		[]any{"AllBlocksCleared"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if want := unhex(t, fixtureLegacy); string(legacy) != string(want) {
		t.Fatalf("legacy fixture:\n got %x\nwant %x", want, legacy)
	}
	// Maps have no canonical order, so compare the decoded values.
	var got any
	if err := msgpack.Unmarshal(unhex(t, fixtureMap), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"ts": 1.5, "data_parallel_rank": int8(1), "events": []any{map[string]any{
		"type": "BlockStored", "block_hashes": []any{int8(7)}, "parent_block_hash": int8(5),
		"token_ids": []any{int8(10), int8(11), int8(12), int8(13)}, "block_size": int8(4), "lora_id": int8(1),
		"medium": "GPU", "lora_name": "adapt", "extra_keys": []any{nil}, "group_idx": int8(0),
		"kv_cache_spec_kind": "full_attention",
	}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("map fixture decodes to %#v", got)
	}
}

func TestEncodeBatchMatchesFixtureAndRoundTrips(t *testing.T) {
	b, err := DecodeBatch(unhex(t, fixtureArray))
	if err != nil {
		t.Fatal(err)
	}
	enc, err := EncodeBatch(&b, EncodingArray)
	if err != nil {
		t.Fatal(err)
	}
	if want := unhex(t, fixtureArray); string(enc) != string(want) {
		t.Fatalf("encoded %x\nwant    %x", enc, want)
	}
	full := Batch{Timestamp: 2.25, HasDPRank: true, DPRank: 3, Events: []RawEvent{
		{Kind: kv.EventStored, BlockHashes: []uint64{1 << 63, 2}, HasParent: true, ParentHash: 77,
			TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 70000}, BlockSize: 4, HasLoraID: true, LoraID: 3,
			Medium: "CPU", LoraName: "l", HasGroup: true, GroupIdx: 1},
		{Kind: kv.EventRemoved, BlockHashes: []uint64{5}, Medium: "GPU", HasGroup: true, GroupIdx: 1},
		{Kind: kv.EventCleared},
	}}
	for _, enc := range []Encoding{EncodingArray, EncodingMap} {
		t.Run(enc.String(), func(t *testing.T) {
			data, err := EncodeBatch(&full, enc)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeBatch(data)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, full) {
				t.Fatalf("round trip\n got %+v\nwant %+v", got, full)
			}
		})
	}
}

func TestConvert(t *testing.T) {
	conv := Converter{BlockSize: 4}
	w := kv.WorkerWithDpRank{WorkerID: 9, DpRank: 1}
	b, err := DecodeBatch(unhex(t, fixtureMap))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := conv.Convert(&b.Events[0], w, 12)
	if err != nil {
		t.Fatal(err)
	}
	local := hashing.BlockHashes([]uint32{10, 11, 12, 13}, 4, hashing.Options{LoraName: "adapt"})
	want := kv.Event{Worker: w, EventID: 12, Kind: kv.EventStored, Tier: kv.TierDevice, HasParent: true, ParentHash: 5,
		Blocks: []kv.StoredBlock{{BlockHash: 7, TokensHash: local[0]}}}
	if !reflect.DeepEqual(ev, want) {
		t.Fatalf("got %+v want %+v", ev, want)
	}
	salted, err := DecodeBatch(unhex(t, fixtureV026))
	if err != nil {
		t.Fatal(err)
	}
	ev, err = conv.Convert(&salted.Events[0], w, 0)
	if err != nil {
		t.Fatal(err)
	}
	plain := hashing.BlockHashes([]uint32{1, 2, 3, 4}, 4, hashing.Options{})
	if ev.Blocks[0].TokensHash == plain[0] {
		t.Fatal("extra keys did not change the block hash")
	}

	tests := []struct {
		name string
		raw  RawEvent
		want error
		tier kv.StorageTier
	}{
		{"block size differs", RawEvent{Kind: kv.EventStored, BlockHashes: []uint64{1}, TokenIDs: make([]uint32, 8), BlockSize: 8}, ErrBlockSizeMismatch, 0},
		{"tokens short", RawEvent{Kind: kv.EventStored, BlockHashes: []uint64{1, 2}, TokenIDs: make([]uint32, 7), BlockSize: 4}, ErrTokensShort, 0},
		{"no blocks", RawEvent{Kind: kv.EventStored, BlockSize: 4}, ErrMalformed, 0},
		{"cpu removal", RawEvent{Kind: kv.EventRemoved, BlockHashes: []uint64{1}, Medium: "CPU"}, nil, kv.TierHostPinned},
		{"disk removal", RawEvent{Kind: kv.EventRemoved, BlockHashes: []uint64{1}, Medium: "DISK"}, nil, kv.TierDisk},
		{"unknown medium", RawEvent{Kind: kv.EventRemoved, BlockHashes: []uint64{1}, Medium: "LocalDisk"}, ErrUnknownMedium, 0},
		{"unknown type", RawEvent{UnknownType: "BlockMoved"}, ErrUnknownEventType, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := conv.Convert(&tt.raw, w, 0)
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			if err == nil && ev.Tier != tt.tier {
				t.Fatalf("tier %v want %v", ev.Tier, tt.tier)
			}
		})
	}
}

func TestDecodeRejectsMalformed(t *testing.T) {
	tests := []struct{ name, hex string }{
		{"empty", ""},
		{"not a container", "2a"},
		{"batch too short", "91 cb 3ff8000000000000"},
		{"truncated float", "92 cb 3ff8"},
		{"events not array", "92 00 2a"},
		{"empty event", "92 00 91 90"},
		{"stored missing block size", "92 00 91 94 ab 426c6f636b53746f726564 91 01 c0 90"},
		{"removed without hashes", "92 00 91 91 ac 426c6f636b52656d6f766564"},
		{"negative token", "92 00 91 95 ab 426c6f636b53746f726564 91 01 c0 91 ff 04"},
		{"empty bin hash", "92 00 91 95 ab 426c6f636b53746f726564 91 c4 00 c0 90 04"},
		{"map without type", "92 00 91 81 a1 61 01"},
		{"array length beyond payload", "92 00 dd 7fffffff"},
		{"trailing bytes", "92 00 90 00"},
		{"negative dp rank", "93 00 90 ff"},
		{"deep nesting", "92 00 91 92 b0 416c6c426c6f636b73436c6561726564 " + strings.Repeat("91", 40) + "00"},
		{"invalid code", "92 00 91 c1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeBatch(unhex(t, tt.hex)); !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v, want ErrMalformed", err)
			}
		})
	}
	if _, err := DecodeMessage([][]byte{nil, {1, 2}, unhex(t, fixtureArray)}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short seq frame: %v", err)
	}
	if _, err := DecodeMessage([][]byte{nil, EncodeSeq(1)}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("two frames: %v", err)
	}
}

func FuzzDecodeBatch(f *testing.F) {
	for _, fx := range []string{fixtureArray, fixtureLegacy, fixtureMap, fixtureV026} {
		f.Add(unhex(f, fx))
	}
	// The engine forms with their own rules: vLLM's LoRA block pool,
	// lora_id alone, an unknown type between known ones, SGLang's EAGLE
	// pairs and short last page, a block size mismatch.
	toks := []any{1, 2, 3, 4, 5, 6, 7, 8}
	for _, events := range [][]any{
		{[]any{"BlockStored", []any{1, 2}, nil, toks, 4, 3, "GPU", "sql", []any{[]any{"sql", "salt"}, []any{"sql"}}, 0}},
		{map[string]any{"type": "BlockStored", "block_hashes": []any{1}, "token_ids": toks[:4], "block_size": 4, "lora_id": 3}},
		{[]any{"AllBlocksCleared"}, []any{"BlockMoved", []any{1}, "CPU"}, map[string]any{"type": "Future"}},
		{[]any{"BlockStored", []any{1}, nil, []any{[]any{1, 2}, []any{2, 3}, []any{3, 4}, []any{4, 5}}, 4, nil, "GPU"}},
		{[]any{"BlockStored", []any{1}, nil, toks[:4], 4, nil, "CPU_PINNED"}, []any{"BlockStored", []any{2}, 1, toks[:2], 2, nil, "EXTERNAL"}},
		{[]any{"BlockStored", []any{1}, nil, toks, 8, nil, "TAPE"}},
	} {
		b, err := msgpack.Marshal([]any{1.0, events, 0})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	conv := Converter{BlockSize: 4}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeBatch(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			if r := ReasonOf(err); r != ReasonMalformed && r != ReasonBadTokenIDs {
				t.Fatalf("decode error %v classified %s", err, r)
			}
			return
		}
		roundTrip(t, &b)
		for i := range b.Events {
			ev, err := conv.Convert(&b.Events[i], kv.WorkerWithDpRank{}, 0)
			if err != nil {
				if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownEventType) &&
					!errors.Is(err, ErrUnknownMedium) && !errors.Is(err, ErrShortPage) {
					t.Fatalf("convert error %v is none of the classified ones", err)
				}
				continue
			}
			if err := ev.Validate(); err != nil {
				t.Fatalf("converted event invalid: %v", err)
			}
		}
	})
}

// roundTrip checks that a decoded batch without extra keys (which decode
// to fingerprints) encodes to bytes that decode to the same events, in
// both encodings: token pairs, unknown types and every field survive.
func roundTrip(t *testing.T, b *Batch) {
	for i := range b.Events {
		if b.Events[i].ExtraKeys != nil {
			return
		}
	}
	for _, enc := range []Encoding{EncodingArray, EncodingMap} {
		data, err := EncodeBatch(b, enc)
		if err != nil {
			t.Fatalf("%s: re-encode %+v: %v", enc, b, err)
		}
		got, err := DecodeBatch(data)
		if err != nil {
			t.Fatalf("%s: decode the re-encoded batch: %v", enc, err)
		}
		if !reflect.DeepEqual(normalized(got.Events), normalized(b.Events)) {
			t.Fatalf("%s: round trip\n got %+v\nwant %+v", enc, got.Events, b.Events)
		}
	}
}

// normalized makes empty slices nil: a missing field and an empty list
// decode differently and mean the same.
func normalized(evs []RawEvent) []RawEvent {
	if len(evs) == 0 {
		return nil
	}
	out := make([]RawEvent, len(evs))
	for i, ev := range evs {
		if len(ev.BlockHashes) == 0 {
			ev.BlockHashes = nil
		}
		if len(ev.TokenIDs) == 0 {
			ev.TokenIDs = nil
		}
		out[i] = ev
	}
	return out
}
