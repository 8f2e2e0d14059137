package tokenizer

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkPathological measures the CPU per MB of text of Encode on 1 MB
// of English (the benchmark text repeated, warm word cache: a router's
// steady state), of one character repeated, of spaces and of digits, for
// each golden tokenizer, and each one's ratio to English (x-english; the
// goal is 3 at most). cpu-s/MB is the process's CPU time (user + system,
// the garbage collector's included), which a busy machine inflates less
// than wall time. Run:
//
//	go test -run '^$' -bench BenchmarkPathological -benchtime 3x ./tokenizer/
func BenchmarkPathological(b *testing.B) {
	const size = 1 << 20
	en := strings.Repeat(benchText(b, "bench_en.txt"), size/17000+1)[:size]
	inputs := []struct{ name, text string }{
		{"english", en},
		{"char", strings.Repeat("a", size)},
		{"spaces", strings.Repeat(" ", size)},
		{"digits", strings.Repeat("7", size)},
	}
	for _, model := range goldenModels[:6] {
		tok := golden(b, model)
		english := 0.0
		for _, in := range inputs {
			b.Run(model+"/"+in.name, func(b *testing.B) {
				tok.Encode(in.text, false) // warm the word cache
				b.SetBytes(size)
				start := cpuTime()
				for b.Loop() {
					tok.Encode(in.text, false)
				}
				perMB := (cpuTime() - start).Seconds() / float64(b.N) / (float64(size) / (1 << 20))
				b.ReportMetric(perMB, "cpu-s/MB")
				if in.name == "english" {
					english = perMB
				} else if english > 0 {
					b.ReportMetric(perMB/english, "x-english")
				}
			})
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
