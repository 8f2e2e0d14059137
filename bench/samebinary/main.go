//go:build samebinary

// Command samebinary measures the CPU per routing decision of two
// revisions of kvrouter in one process, in alternating blocks: both see
// the same machine at the same moments, the same heap and the same
// binary, so a drift of the host's speed, which moves one run of a
// benchmark against another by 20% on a shared 2-vCPU VM, hits both
// alike. bench/cpuperop-samebinary.sh builds it.
//
// Each block runs -block decisions of one side, sequentially, and reads
// the process's CPU time (getrusage: every goroutine, the actors, the
// GC) before and after; the sides alternate ABBA. It prints each mode's
// median per-pair ratio (NEW ÷ OLD) with its interquartile range, and the
// ratio of the total CPU.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"syscall"
	"time"
)

// blockSize is both sides' KV block size in tokens.
const blockSize = 16

type side struct {
	route, query func(context.Context, int64) error
	stop         func()
}

func main() {
	block := flag.Int("block", 400, "decisions per block")
	dur := flag.Duration("duration", 60*time.Second, "time per mode")
	stride := flag.Int("stride", 1, "router-active-sequence-stride of both sides")
	modes := flag.String("modes", "route,query", "route (route+free with state updates), query (no state updates)")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the measured blocks (both sides: their functions differ by module path)")
	memProfile := flag.String("memprofile", "", "write an allocation profile at the end (every 4 KiB allocated is sampled)")
	flag.Parse()
	// Every goroutine a side starts (its actors' dispatchers) carries the
	// side's profile label, so -tagfocus=side=OLD splits a profile.
	var old, cur *side
	pprof.Do(context.Background(), pprof.Labels("side", "OLD"), func(context.Context) {
		var err error
		old, err = newSideOLD(*stride)
		check(err)
	})
	pprof.Do(context.Background(), pprof.Labels("side", "NEW"), func(context.Context) {
		var err error
		cur, err = newSideNEW(*stride)
		check(err)
	})
	defer old.stop()
	defer cur.stop()
	if *memProfile != "" {
		runtime.MemProfileRate = 4096
		defer func() {
			f, err := os.Create(*memProfile)
			check(err)
			check(pprof.Lookup("allocs").WriteTo(f, 0))
			check(f.Close())
		}()
	}
	if *profile != "" {
		f, err := os.Create(*profile)
		check(err)
		check(pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}
	for _, mode := range strings.Split(*modes, ",") {
		pick := func(s *side) func(context.Context, int64) error {
			if mode == "query" {
				return s.query
			}
			return s.route
		}
		measure(mode, pick(old), pick(cur), *block, *dur)
	}
}

func measure(mode string, old, cur func(context.Context, int64) error, block int, dur time.Duration) {
	ctx := context.Background()
	var n int64
	run := func(f func(context.Context, int64) error) time.Duration {
		c0 := processCPU()
		for range block {
			n++
			check(f(ctx, n))
		}
		return processCPU() - c0
	}
	oldCtx := pprof.WithLabels(ctx, pprof.Labels("side", "OLD"))
	newCtx := pprof.WithLabels(ctx, pprof.Labels("side", "NEW"))
	labelled := func(lctx context.Context, f func(context.Context, int64) error) func(context.Context, int64) error {
		return func(ctx context.Context, n int64) error {
			pprof.SetGoroutineLabels(lctx)
			defer pprof.SetGoroutineLabels(ctx)
			return f(ctx, n)
		}
	}
	old, cur = labelled(oldCtx, old), labelled(newCtx, cur)
	run(old) // warm both before measuring
	run(cur)
	var ratios []float64
	var totOld, totNew time.Duration
	end := time.Now().Add(dur)
	for i := 0; time.Now().Before(end); i++ {
		var o, c time.Duration
		if i%2 == 0 {
			o, c = run(old), run(cur)
		} else {
			c, o = run(cur), run(old)
		}
		totOld += o
		totNew += c
		if o > 0 {
			ratios = append(ratios, float64(c)/float64(o))
		}
	}
	sort.Float64s(ratios)
	q := func(f float64) float64 { return ratios[int(f*float64(len(ratios)-1))] }
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(len(ratios)*block) }
	fmt.Printf("%s: OLD %.1f µs CPU/decision, NEW %.1f; NEW/OLD total %.3f, per-pair median %.3f [IQR %.3f-%.3f] over %d pairs of %d decisions\n",
		mode, per(totOld), per(totNew), float64(totNew)/float64(totOld), q(0.5), q(0.25), q(0.75), len(ratios), block)
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	check(syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func prompt(n int, salt uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = salt*100000 + uint32(i)
	}
	return out
}

func waitFor(what string, ok func() bool) error {
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if ok() {
			return nil
		}
	}
	return fmt.Errorf("timed out waiting: %s", what)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "samebinary:", err)
		os.Exit(1)
	}
}
