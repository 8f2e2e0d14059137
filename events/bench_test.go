package events

import (
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

// benchStored is a typical engine event: one request's prompt of 16 new
// blocks under a parent, with hashes large enough to use all 20 digits.
func benchStored() kv.Event {
	ev := kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 7, DpRank: 1}, EventID: 123456, Kind: kv.EventStored,
		HasParent: true, ParentHash: 0xdeadbeefcafef00d}
	for i := range 16 {
		h := uint64(i+1) * 0x9e3779b97f4a7c15
		ev.Blocks = append(ev.Blocks, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(h), TokensHash: kv.LocalBlockHash(h ^ 0xff)})
	}
	return ev
}

func BenchmarkDecodeRouterEventJSON(b *testing.B) {
	ev := benchStored()
	data, err := EncodeRouterEventJSON(&ev)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeRouterEventJSON(data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkEncodeRouterEventJSON(b *testing.B) {
	ev := benchStored()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeRouterEventJSON(&ev); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkDecodeProto(b *testing.B) {
	ev := benchStored()
	data, err := EncodeProtoBatch([]kv.Event{ev})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeProto(data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
