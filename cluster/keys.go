package cluster

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/memberlist"
)

// ErrInsecure is wrapped by the Validate error of a Config that would
// serve gossip unauthenticated on a non-loopback address.
var ErrInsecure = errors.New("unauthenticated gossip on a non-loopback address")

// maxKeys bounds a key file: rotation needs two keys at a time, a few more
// are tolerated, hundreds are a mistake (every key is tried on every
// packet that does not decrypt with the first).
const maxKeys = 8

// ParseKeys reads a cluster key file: one base64 key (standard alphabet,
// padding optional) per line, 16, 24 or 32 bytes (AES-128, -192, -256),
// the primary (the one this replica encrypts with and presents) first.
// Blank lines and lines starting with # are ignored.
func ParseKeys(data []byte) ([][]byte, error) {
	var keys [][]byte
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(line, "="))
		if err != nil {
			return nil, fmt.Errorf("line %d: not base64: %w", i+1, err)
		}
		if err := memberlist.ValidateKey(key); err != nil {
			return nil, fmt.Errorf("line %d: %d bytes: %w", i+1, len(key), err)
		}
		for _, k := range keys {
			if bytes.Equal(k, key) {
				return nil, fmt.Errorf("line %d: key %s listed twice", i+1, KeyID(key))
			}
		}
		keys = append(keys, key)
	}
	switch {
	case len(keys) == 0:
		return nil, errors.New("no key (one base64 key per line, e.g. from `openssl rand -base64 32`)")
	case len(keys) > maxKeys:
		return nil, fmt.Errorf("%d keys, more than %d", len(keys), maxKeys)
	}
	return keys, nil
}

// LoadKeyFile reads and parses a cluster key file (see ParseKeys).
func LoadKeyFile(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster key file: %w", err)
	}
	keys, err := ParseKeys(data)
	if err != nil {
		return nil, fmt.Errorf("cluster key file %s: %w", path, err)
	}
	return keys, nil
}

// KeyID names a key in logs without revealing it: the first 8 hex digits
// of its SHA-256 (`base64 -d <<<KEY | sha256sum | cut -c1-8`).
func KeyID(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:4])
}

func keyIDs(keys [][]byte) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = KeyID(k)
	}
	return out
}

func keysEqual(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func cloneKeys(keys [][]byte) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = bytes.Clone(k)
	}
	return out
}

// setKeyring makes ring hold exactly keys, keys[0] as primary, so that
// every key of the old and of the new set decrypts throughout: new keys
// are added, the primary switched, then the old ones removed.
//
// memberlist's RemoveKey shifts the keys after the removed one in place,
// under its lock, while packet handlers iterate the slice GetKeys gave
// them without it; removing only the last key shifts nothing. Keys to
// drop are therefore removed from the end, and a key to keep that sits
// behind one to drop is taken off and appended again (missing for a few
// instructions; the usual rotation never needs it: the key it drops is
// the last).
func setKeyring(ring *memberlist.Keyring, keys [][]byte) error {
	for _, k := range keys {
		if err := ring.AddKey(k); err != nil {
			return err
		}
	}
	if err := ring.UseKey(keys[0]); err != nil {
		return err
	}
	wanted := func(k []byte) bool {
		for _, w := range keys {
			if bytes.Equal(w, k) {
				return true
			}
		}
		return false
	}
	var readd [][]byte
	for {
		cur := ring.GetKeys()
		if len(cur) <= 1 {
			break
		}
		drop := false
		for _, k := range cur[1:] {
			drop = drop || !wanted(k)
		}
		if !drop {
			break
		}
		last := bytes.Clone(cur[len(cur)-1])
		if err := ring.RemoveKey(last); err != nil {
			return err
		}
		if wanted(last) {
			readd = append(readd, last)
		}
	}
	for _, k := range readd {
		if err := ring.AddKey(k); err != nil {
			return err
		}
	}
	return nil
}
