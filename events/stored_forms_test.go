package events

import (
	"errors"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// storedMsg is a protobuf Stored event of worker 3 with the body given.
func storedMsg(body *messages.BlockStored) *messages.KvEvent {
	return &messages.KvEvent{Worker: &messages.WorkerRank{WorkerId: 3}, EventId: 9,
		Data: &messages.KvEvent_Stored{Stored: body}}
}

// A publisher may send either form of a block chain; both decode to the
// same event, and a body mixing or truncating them is malformed.
func TestBlockStoredForms(t *testing.T) {
	parent := uint64(77)
	want := kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 3}, EventID: 9, Kind: kv.EventStored, HasParent: true, ParentHash: 77,
		Blocks: []kv.StoredBlock{{BlockHash: 1, TokensHash: 10}, {BlockHash: 2, TokensHash: 20}}}
	perBlock := &messages.BlockStored{ParentHash: &parent, Blocks: []*messages.StoredBlock{
		{BlockHash: 1, TokensHash: 10}, {BlockHash: 2, TokensHash: 20}}}
	packed := &messages.BlockStored{ParentHash: &parent, BlockHashes: []uint64{1, 2}, TokensHashes: []uint64{10, 20}}
	for name, body := range map[string]*messages.BlockStored{"per block": perBlock, "packed": packed} {
		got, err := FromProto(storedMsg(body))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v, %v", name, got, err)
		}
	}
	if enc := ToProto(&want).GetStored(); len(enc.Blocks) != 0 || !reflect.DeepEqual(enc.BlockHashes, []uint64{1, 2}) ||
		!reflect.DeepEqual(enc.TokensHashes, []uint64{10, 20}) {
		t.Errorf("ToProto does not send the packed form: %+v", enc)
	}
	bad := map[string]*messages.BlockStored{
		"both forms":     {Blocks: perBlock.Blocks, BlockHashes: packed.BlockHashes, TokensHashes: packed.TokensHashes},
		"tokens missing": {BlockHashes: []uint64{1, 2}, TokensHashes: []uint64{10}},
		"hashes missing": {TokensHashes: []uint64{10}},
		"nil block":      {Blocks: []*messages.StoredBlock{{BlockHash: 1, TokensHash: 10}, nil}},
		"no body":        nil,
	}
	for name, body := range bad {
		if ev, err := FromProto(storedMsg(body)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %+v, %v; want ErrMalformed", name, ev, err)
		}
	}
	removed := &messages.KvEvent{Worker: &messages.WorkerRank{WorkerId: 3}, Data: &messages.KvEvent_Removed{}}
	if ev, err := FromProto(removed); err != nil || ev.Kind != kv.EventRemoved || len(ev.Removed) != 0 {
		t.Errorf("removed without a body: got %+v, %v; want an empty removal (as an empty body decodes)", ev, err)
	}
	// Over the wire too: a batch holding the per-block form decodes.
	data, err := proto.Marshal(&messages.KvEventBatch{Events: []*messages.KvEvent{storedMsg(perBlock)}})
	if err != nil {
		t.Fatal(err)
	}
	if evs, err := DecodeProto(data); err != nil || len(evs) != 1 || !reflect.DeepEqual(evs[0], want) {
		t.Fatalf("per-block batch: %+v %v", evs, err)
	}
}
