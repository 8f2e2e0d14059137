package events

import (
	"errors"
	"reflect"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// The shared tier on the wire: Dynamo's storage_tier string in JSON, the
// StorageTier enum in protobuf; unknown values are malformed, never a
// panic and never a silent device block.
func TestSharedTierDecodes(t *testing.T) {
	want := kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 900, DpRank: 1}, EventID: 3, Tier: kv.TierShared, Kind: kv.EventStored,
		Blocks: []kv.StoredBlock{{BlockHash: 11, TokensHash: 22}}}
	for _, name := range []string{"shared", "Shared", "SHARED"} {
		in := `{"worker_id":900,"storage_tier":"` + name + `","event":{"event_id":3,"dp_rank":1,"data":{"stored":{"blocks":[{"block_hash":11,"tokens_hash":22}]}}}}`
		got, err := DecodeRouterEventJSON([]byte(in))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: got %+v, %v", name, got, err)
		}
	}
	out, err := EncodeRouterEventJSON(&want)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := DecodeRouterEventJSON(out); err != nil || !reflect.DeepEqual(again, want) {
		t.Fatalf("JSON round trip %s: %+v, %v", out, again, err)
	}
	data, err := EncodeProtoBatch([]kv.Event{want})
	if err != nil {
		t.Fatal(err)
	}
	if evs, err := DecodeProto(data); err != nil || len(evs) != 1 || !reflect.DeepEqual(evs[0], want) {
		t.Fatalf("proto round trip: %+v, %v", evs, err)
	}

	for _, bad := range []string{`"sharedd"`, `""x`, `5`, `{}`, `["shared"]`} {
		in := `{"worker_id":1,"storage_tier":` + bad + `,"event":{"data":"cleared"}}`
		if _, err := DecodeRouterEventJSON([]byte(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("storage_tier %s: err = %v, want ErrMalformed", bad, err)
		}
	}
	for _, tier := range []messages.StorageTier{-1, messages.StorageTier(kv.NumTiers), 1 << 20} {
		m := &messages.KvEvent{Worker: &messages.WorkerRank{WorkerId: 1}, Tier: tier,
			Data: &messages.KvEvent_Cleared{Cleared: &messages.AllBlocksCleared{}}}
		if _, err := FromProto(m); !errors.Is(err, ErrMalformed) {
			t.Errorf("proto tier %d: err = %v, want ErrMalformed", tier, err)
		}
	}
}
