package cluster

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/hashicorp/memberlist"
)

// nodeMeta is what a replica advertises in memberlist node metadata.
type nodeMeta struct {
	ReplicaID string `json:"id"`
	HTTPAddr  string `json:"http,omitempty"`
	Version   string `json:"v,omitempty"`
	// StreamPort is the port of the persistent gossip stream listener, on
	// the node's memberlist address (0: none, use memberlist's paths).
	StreamPort int `json:"sp,omitempty"`
	// StreamVersion is the stream protocol spoken on StreamPort; a peer
	// that advertises another (or none, before the hello existed) is
	// reached over memberlist's paths only.
	StreamVersion int `json:"sv,omitempty"`
	// StreamKey is the replica's boot public key (ed25519, base64): it
	// signs the replica's stream hellos and the messages it sends over
	// memberlist's paths, which is how a receiver knows which member sent
	// what. memberlist (encrypted with the cluster key) vouches for it.
	StreamKey string `json:"sk,omitempty"`
	// Sessions says the replica keeps a sticky-session table and runs its
	// anti-entropy (SessionSink); a peer without it (an older version) is
	// not waited for.
	Sessions bool `json:"ss,omitempty"`
}

// streamKey decodes StreamKey; nil when absent or malformed.
func (m nodeMeta) streamKey() ed25519.PublicKey {
	b, err := base64.StdEncoding.DecodeString(m.StreamKey)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil
	}
	return ed25519.PublicKey(b)
}

// encodeMeta fails when the encoding exceeds memberlist's MetaMaxSize,
// which memberlist would otherwise reject at runtime (serf panics).
func encodeMeta(m nodeMeta) ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode node meta: %w", err)
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("node meta is %d bytes, more than memberlist's %d: shorten ReplicaID, HTTPAddr or Version",
			len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}

func decodeMeta(b []byte) (nodeMeta, error) {
	var m nodeMeta
	if len(b) == 0 {
		return m, nil
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nodeMeta{}, fmt.Errorf("%w: node meta: %w", ErrMalformed, err)
	}
	return m, nil
}
