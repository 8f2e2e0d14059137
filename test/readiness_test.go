package test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/replica"
)

type readyReply struct {
	Status     string `json:"status"`
	Reason     string `json:"reason"`
	Conditions []struct {
		Name   string `json:"name"`
		OK     bool   `json:"ok"`
		Reason string `json:"reason"`
	} `json:"conditions"`
}

func readyz(t testing.TB, base string) (int, readyReply) {
	t.Helper()
	code, body := Get(t, base+"/readyz")
	var r readyReply
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("/readyz %q: %v", body, err)
	}
	return code, r
}

func (r readyReply) condition(name string) (ok bool, reason string, found bool) {
	for _, c := range r.Conditions {
		if c.Name == name {
			return c.OK, c.Reason, true
		}
	}
	return false, "", false
}

func keyFile(t *testing.T, b byte) string {
	t.Helper()
	key := make([]byte, 32)
	for i := range key {
		key[i] = b
	}
	path := filepath.Join(t.TempDir(), "cluster.key")
	if err := os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A replica whose cluster key is not its peers' cannot join: it is not
// ready, /readyz and the metrics say it is the key, while a replica with
// the right key joins the same seed and is ready.
func TestMisKeyedReplicaIsNotReady(t *testing.T) {
	good, wrong := keyFile(t, 1), keyFile(t, 2)
	member := func(key string, seed *replica.Replica, id string) *replica.Replica {
		return StartReplica(t, func(c *config.Config) {
			c.ReplicaID = fmt.Sprintf("%s-%d", id, time.Now().UnixNano()%100000)
			c.ClusterBind = "127.0.0.1:0"
			c.ClusterFast = true
			c.ClusterKeyFile = key
			if seed != nil {
				c.NATSURL = seed.NATSURL()
				c.ClusterJoin = []string{seed.ClusterAddr()}
			}
		})
	}
	seed := member(good, nil, "seed")
	testutil.EventuallyNil(t, 20*time.Second, seed.Ready) // no seeds: alone by design
	misKeyed := member(wrong, seed, "miskeyed")
	base := BaseURL(misKeyed)

	var reply readyReply
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		var code int
		code, reply = readyz(t, base)
		if code != http.StatusServiceUnavailable || !strings.Contains(reply.Reason, "cluster key mismatch") {
			return fmt.Errorf("/readyz = %d %+v, want 503 naming the key mismatch", code, reply)
		}
		return nil
	})
	if !strings.Contains(reply.Reason, "want at least 2") || !strings.Contains(reply.Reason, "--cluster-key-file") {
		t.Errorf("reason %q should say what is wanted and what to check", reply.Reason)
	}
	if ok, why, found := reply.condition("cluster"); !found || ok || !strings.Contains(why, "cluster key mismatch") {
		t.Errorf("cluster condition ok=%v found=%v %q, want a failed condition naming the key", ok, found, why)
	}
	if n := metricValue(t, base, `kvrouter_cluster_key_mismatches_total{source="memberlist"} `); n < 1 {
		t.Errorf("kvrouter_cluster_key_mismatches_total = %v, want at least 1", n)
	}
	for sample, want := range map[string]float64{
		"kvrouter_cluster_membership_ok ": 0, "kvrouter_cluster_expected_members ": 2, "kvrouter_ready ": 0, "kvrouter_cluster_members ": 1,
	} {
		if got := metricValue(t, base, sample); got != want {
			t.Errorf("%s = %v, want %v", sample, got, want)
		}
	}
	// The seed saw the outsider's gossip it could not decrypt, and stays ready.
	if n := metricValue(t, BaseURL(seed), `kvrouter_cluster_key_mismatches_total{source="memberlist"} `); n < 1 {
		t.Errorf("seed's kvrouter_cluster_key_mismatches_total = %v, want at least 1", n)
	}
	if code, r := readyz(t, BaseURL(seed)); code != http.StatusOK {
		t.Errorf("seed /readyz = %d %+v", code, r)
	}

	// The same seed with the right key: joined and ready.
	peer := member(good, seed, "peer")
	testutil.EventuallyNil(t, 20*time.Second, peer.Ready)
	if code, r := readyz(t, BaseURL(peer)); code != http.StatusOK {
		t.Errorf("well-keyed peer /readyz = %d %+v", code, r)
	} else if ok, why, _ := r.condition("cluster"); !ok {
		t.Errorf("well-keyed peer's cluster condition failed: %s", why)
	}
	if misKeyed.Ready() == nil {
		t.Error("the mis-keyed replica became ready")
	}
}
