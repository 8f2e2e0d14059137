package sessions

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// Digest summarises a table: how many entries and a wrapping sum of their
// hashes (id, rank, version, ended), so two tables holding the same
// entries agree whatever order the writes came in. Last use is left out:
// it changes on every request and replicas only announce it now and then.
type Digest struct {
	Count int
	Hash  uint64
}

func entryHash(e Entry) uint64 {
	var buf [8 + 4 + 8 + 1]byte
	binary.LittleEndian.PutUint64(buf[0:], uint64(e.Worker.WorkerID))
	binary.LittleEndian.PutUint32(buf[8:], e.Worker.DpRank)
	binary.LittleEndian.PutUint64(buf[12:], uint64(e.Version.Stamp))
	if e.Ended {
		buf[20] = 1
	}
	// Seeding with the id's and the writer's hashes keeps the fields apart
	// without building one buffer per entry.
	seed := xxh3.HashString(e.ID) ^ xxh3.HashStringSeed(e.Version.Writer, 0x9e3779b97f4a7c15)
	return xxh3.HashSeed(buf[:], seed)
}

func (d *Digest) add(e Entry) {
	d.Count++
	d.Hash += entryHash(e)
}

func (d *Digest) remove(e Entry) {
	d.Count--
	d.Hash -= entryHash(e)
}
