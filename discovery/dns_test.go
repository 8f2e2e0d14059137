package discovery

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/dnstest"
)

func lookOnce(t *testing.T, uri string) ([]Record, error) {
	t.Helper()
	s, err := Parse(uri, Options{Interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return s.(*dnsSource).look(context.Background())
}

func keys(recs []Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Key)
	}
	return out
}

// A real DNS server on loopback: A/AAAA records, SRV records, a name that
// does not exist (an empty fleet) and a server that is gone (an error
// that keeps the last view).
func TestDNSSource(t *testing.T) {
	srv := dnstest.Start(t)
	srv.SetIPs("engines.test", "10.0.0.2", "10.0.0.1", "fd00::7")
	uri := "dns://engines.test.:8001?server=" + srv.Addr()
	recs, err := lookOnce(t, uri)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"dns/10.0.0.1:8001", "dns/10.0.0.2:8001", "dns/[fd00::7]:8001"}; !reflect.DeepEqual(keys(recs), want) {
		t.Fatalf("records %v, want %v", keys(recs), want)
	}
	if r := recs[0]; r.URL != "http://10.0.0.1:8001" || r.KVEventsEndpoint != "tcp://10.0.0.1:5557" ||
		r.ReplayEndpoint != "tcp://10.0.0.1:5558" || !r.Ready || r.ID != WorkerID("dns/10.0.0.1:8001") {
		t.Fatalf("record %+v", r)
	}

	srv.SetSRV("_http._tcp.engines.test", "a.engines.test:9000", "b.engines.test:9001")
	srv.SetIPs("a.engines.test", "10.0.1.1")
	srv.SetIPs("b.engines.test", "10.0.1.2")
	recs, err = lookOnce(t, "dns+srv://_http._tcp.engines.test.?server="+srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"dns/10.0.1.1:9000", "dns/10.0.1.2:9001"}; !reflect.DeepEqual(keys(recs), want) {
		t.Fatalf("SRV records %v, want %v", keys(recs), want)
	}

	if recs, err := lookOnce(t, "dns://nothing.test.:8000?server="+srv.Addr()); err != nil || len(recs) != 0 {
		t.Fatalf("unknown name: %v, %v; want an empty fleet", recs, err)
	}

	srv.Stop()
	_, err = lookOnce(t, uri)
	var re *ReasonError
	if !errors.As(err, &re) || re.Reason != "dns_unreachable" {
		t.Fatalf("stopped server: %v, want a dns_unreachable error", err)
	}
}

// Run emits every interval and follows the records as they change.
func TestDNSSourceFollowsChanges(t *testing.T) {
	srv := dnstest.Start(t)
	srv.SetIPs("pool.test", "10.0.0.1")
	s, err := Parse("dns://pool.test.:8000?server="+srv.Addr(), Options{Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	updates := make(chan Update, 100)
	go s.Run(ctx, func(u Update) { updates <- u })
	expect := func(want ...string) {
		t.Helper()
		deadline := time.After(3 * time.Second)
		for {
			select {
			case u := <-updates:
				if u.Err == nil && reflect.DeepEqual(keys(u.Records), want) {
					return
				}
			case <-deadline:
				t.Fatalf("never saw %v", want)
			}
		}
	}
	expect("dns/10.0.0.1:8000")
	srv.SetIPs("pool.test", "10.0.0.1", "10.0.0.3")
	expect("dns/10.0.0.1:8000", "dns/10.0.0.3:8000")
	srv.SetIPs("pool.test")
	expect()
}
