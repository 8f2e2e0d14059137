package bench

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"
)

func TestProcessCPUTimeGrowsWithWork(t *testing.T) {
	before, err := ProcessCPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for start := time.Now(); time.Since(start) < 60*time.Millisecond; {
		x++
	}
	after, err := ProcessCPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 20*time.Millisecond {
		t.Fatalf("CPU time grew by %v over 60 ms of spinning (x=%d)", after-before, x)
	}
	if _, err := ProcessCPUTime(-1); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}

func TestFreeLoopbackPortIsFreeForTCPAndUDP(t *testing.T) {
	p, err := FreeLoopbackPort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", p)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("tcp %s: %v", addr, err)
	}
	defer ln.Close()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("udp %s: %v", addr, err)
	}
	pc.Close()
}

func TestNewCPUGroupRejectsNonPositiveCap(t *testing.T) {
	if _, err := NewCPUGroup("kvbench-test", 0); err == nil {
		t.Fatal("a zero CPU cap was accepted")
	}
}
