package jinja

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
)

// abusive are templates that ask for unbounded memory, work or output,
// with what their render must fail with. Each was fatal or took tens of
// seconds of CPU before the render was bounded.
var abusive = []struct{ name, src, want string }{
	{"string repeat", `{{ 'x' * 10**11 }}`, "string of over"},
	{"string repeat negative size", `{{ 'xy' * 9223372036854775807 }}`, "string of over"},
	{"list repeat", `{{ ['x'] * 10**11 }}`, "list of over"},
	{"empty nested loops", `{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}`, "too much work"},
	{"tilde doubling", `{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}`, "string of over"},
	{"plus doubling", `{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}`, "string of over"},
	{"list plus doubling", `{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}`, "list of over"},
	{"extend itself", `{% set l = [1] %}{% for i in range(64) %}{% set _ = l.extend(l) %}{% endfor %}`, "list of over"},
	{"join filter", `{{ (['x' * 1000000] * 1000) | join }}`, "string of over"},
	{"join method", `{{ ('x' * 1000000).join(['a'] * 1000) }}`, "string of over"},
	{"replace empty", `{{ ('x' * 100000) | replace('', 'y' * 1000) }}`, "string of over"},
	{"replace method", `{{ ('x' * 100000).replace('x', 'y' * 1000) }}`, "string of over"},
	{"indent width", `{{ 'a' | indent(10**11) }}`, "string of over"},
	{"indent lines", `{{ ('a\n' * 1000000) | indent(1000) }}`, "string of over"},
	{"tojson indent", `{{ [[[1]]] | tojson(indent=10**11) }}`, "string of over"},
	{"format", `{{ ('{0}' * 1000000).format('x' * 1000) }}`, "string of over"},
	{"tojson of itself", `{% set l = [] %}{% set _ = l.append(l) %}{{ l | tojson }}`, "nesting deeper"},
	{"shared tree compare", `{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ ns.a == ns.b }}`, "too much work"},
	{"shared tree repr", `{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}`, "output is over"},
	{"string to list", `{{ ('x' * 100000) | list | length }}`, "list of over"},
	{"split", `{{ (' a' * 200000).split() | length }}`, "list of over"},
	{"splitlines", `{{ ('\n' * 200000).splitlines() | length }}`, "list of over"},
	{"range", `{{ range(10**18) | length }}`, "list of over"},
	{"range negative step", `{{ range(10**18, 0 - 10**18, -1) | length }}`, "list of over"},
	{"unique quadratic", `{{ range(60000) | unique | length }}`, "too much work"},
	{"sort big strings", `{% set s = 'x' * 1000000 %}{{ ([s ~ 'a', s ~ 'b'] * 30000) | sort | length }}`, "too much work"},
	{"sort folded keys", `{% set s = 'X' * 1000000 %}{{ ([s] * 100) | sort | length }}`, "builds too much"},
	{"many comparisons in one expression", "{% set s = 'x' * 1000000 %}{% set t = 'x' * 1000000 %}{{ s == t" + strings.Repeat(" and s == t", 500) + " }}", "too much work"},
	{"many big strings", `{% set l = [] %}{% for i in range(100) %}{% set _ = l.append(('x' * 500000) ~ i) %}{% endfor %}`, "builds too much"},
}

// smallLimits lowers the render limits for one test, so each abusive
// template reaches them in milliseconds; the defaults are the same code
// with larger numbers.
func smallLimits(t testing.TB) {
	out, val, items, steps, alloc := maxOutput, maxValue, maxItems, maxSteps, maxAlloc
	t.Cleanup(func() { maxOutput, maxValue, maxItems, maxSteps, maxAlloc = out, val, items, steps, alloc })
	maxOutput, maxValue, maxItems, maxSteps, maxAlloc = 1<<20, 1<<20, 1<<16, 200_000, 8<<20
}

// TestAbusiveTemplatesAreBounded: every abusive template fails with a
// RenderError, quickly and without growing the heap past the budget.
func TestAbusiveTemplatesAreBounded(t *testing.T) {
	smallLimits(t)
	for _, tc := range abusive {
		t.Run(tc.name, func(t *testing.T) {
			tpl, err := Parse(tc.src)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			out, err := tpl.Render(nil)
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			var re *RenderError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("rendered %d bytes, err %v; want a RenderError with %q", len(out), err, tc.want)
			}
			// Allocation is bounded by the budget, one value's transient
			// copies (a repr cut past maxValue, a builder's growth) and
			// each step's scope (a loop iteration's variables), never by
			// what the template asked for.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(maxAlloc+6*maxValue+int64(maxSteps)*512) {
				t.Errorf("allocated %d MiB", alloc>>20)
			}
			t.Logf("%v, %d MiB allocated: %v", took.Round(time.Millisecond), (after.TotalAlloc-before.TotalAlloc)>>20, err)
		})
	}
}

// TestDefaultLimits: the two templates of the report, with the limits a
// router runs with: no fatal allocation, and the empty loops stop.
func TestDefaultLimits(t *testing.T) {
	for _, src := range []string{`{{ 'x' * 10**11 }}`, `{{ (['x'] * 10**11) | length }}`, `{{ 'x' | indent(10**11) }}`} {
		tpl, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tpl.Render(nil); err == nil || !strings.Contains(err.Error(), "of over") {
			t.Errorf("%s: err %v, want a size error", src, err)
		}
	}
}

// TestRenderTimeout: work the step and size budgets do not see (long
// string comparisons) is stopped by the wall-clock backstop.
func TestRenderTimeout(t *testing.T) {
	defer func(d time.Duration) { renderTimeout = d }(renderTimeout)
	renderTimeout = 50 * time.Millisecond
	tpl, err := Parse(`{% set a = 'x' * 50000000 %}{% set b = 'x' * 50000000 %}{% for i in range(100000) %}{% if a < b %}{% endif %}{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = tpl.Render(nil)
	if err == nil || !strings.Contains(err.Error(), "took longer") {
		t.Fatalf("err %v, want the render timeout", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("stopped after %v", took)
	}
}

// TestBoundedOperationsStillWork: the bounds refuse sizes, not the
// operations: results under them are Python's.
func TestBoundedOperationsStillWork(t *testing.T) {
	for src, want := range map[string]string{
		`{{ 'ab' * 3 }}|{{ 'ab' * 0 }}|{{ 'ab' * -2 }}`:                "ababab||",
		`{{ [1, 2] * 2 }}|{{ [1] * 0 }}`:                               "[1, 2, 1, 2]|[]",
		`{{ 2 ** 10 }}|{{ 3 ** 0 }}|{{ 7 ** 3 }}`:                      "1024|1|343",
		`{{ 2 ** 10**18 }}`:                                            "0", // wraps as int64 multiplication does
		`{{ 'a-b' | replace('-', '--') }}|{{ 'ab'.replace('', '.') }}`: "a--b|.a.b.",
		`{{ 'a\nb' | indent(2, true) }}`:                               "  a\n  b",
		`{{ [1, [2]] | tojson(indent=1) }}`:                            "[\n 1,\n [\n  2\n ]\n]",
		`{% set l = [] %}{% set _ = l.append(l) %}{{ l | length }}`:    "1",
		`{{ 'a b  c'.split() | length }}|{{ 'a b c' | wordcount }}`:    "3|3",
		`{% for i in range(3) %}{% endfor %}ok`:                        "ok",
	} {
		tpl, err := Parse(src)
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		got, err := tpl.Render(nil)
		if err != nil || got != want {
			t.Errorf("%q = %q, %v; want %q", src, got, err, want)
		}
	}
}
