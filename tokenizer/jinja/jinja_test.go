package jinja

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func render(t *testing.T, src string, vars map[string]any) string {
	t.Helper()
	tpl, err := Parse(src)
	if err != nil {
		t.Fatalf("parse %q: %v", src, err)
	}
	out, err := tpl.Render(vars)
	if err != nil {
		t.Fatalf("render %q: %v", src, err)
	}
	return out
}

func TestRender(t *testing.T) {
	msgs, err := FromJSON([]byte(`[{"role":"user","content":"  hi\n","z":1,"a":{"y":[1,2.5,"x"],"b":null}}]`))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]any{"messages": msgs}
	for _, tc := range []struct{ src, want string }{
		{`{{ messages[0] | tojson }}`, `{"role": "user", "content": "  hi\n", "z": 1, "a": {"y": [1, 2.5, "x"], "b": null}}`},
		{`{{ messages[0].a | tojson(indent=2) }}`, "{\n  \"y\": [\n    1,\n    2.5,\n    \"x\"\n  ],\n  \"b\": null\n}"},
		{`{{ messages[0].a | tojson(sort_keys=true) }}`, `{"b": null, "y": [1, 2.5, "x"]}`},
		{`{% for k, v in messages[0].items() %}{{ k }},{% endfor %}`, `role,content,z,a,`},
		{`[{{ messages[0].content.rstrip('\n') }}][{{ messages[0].content.strip() }}][{{ 'xxaxx'.strip('x') }}]`, "[  hi][hi][a]"},
		{`{{ 'a b  c'.split() | length }} {{ 'a,b,c'.split(',', 1)[1] }} {{ 'a,b,c'.rsplit(',', 1)[0] }}`, "3 b,c a,b"},
		{`{{ [1,2,3,4][::-1] }} {{ [1,2,3,4][1:3] }} {{ 'hello'[1:-1] }} {{ [1,2,3][-1] }}`, "[4, 3, 2, 1] [2, 3] ell 3"},
		{`{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}`, "02"},
		{`{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}`, "1"},
		{`{% set ns = namespace(x=1) %}{% for i in [1] %}{% set ns.x = 2 %}{% endfor %}{{ ns.x }}`, "2"},
		{`{% macro m(a, b='d') %}{{ a }}{{ b }}{% endmacro %}{{ m('x') }}{{ m('x', b='y') }}`, "xdxy"},
		{`{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ 4 / 2 }} {{ 2 ** 10 }}`, "3 -4 -2 2.0 1024"},
		{`{{ x is defined }} {{ none is none }} {{ 'a' is string }} {{ 3 is divisibleby 3 }}`, "False True True True"},
		{`{%- if true -%}   a   {%- endif -%}  b`, "ab"},
		{"{% if true %}\n    x\n{% endif %}\n", "    x\n"},
		{`{{ "a" if false }}|{{ "b" if false else "c" }}`, "|c"},
		{`{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='z') | list }}`, "[1]"},
		{`{{ ['b', 'A', 'c'] | sort | join('') }} {{ [3,1,2] | max }}`, "Abc 3"},
	} {
		if got := render(t, tc.src, vars); got != tc.want {
			t.Errorf("%s\n got  %q\n want %q", tc.src, got, tc.want)
		}
	}
}

func TestStrftimeNow(t *testing.T) {
	defer func(f func() time.Time) { Now = f }(Now)
	Now = func() time.Time { return time.Date(2026, 3, 7, 14, 5, 9, 0, time.UTC) }
	if got := render(t, `{{ strftime_now('%Y-%m-%d %H:%M:%S %d %B %Y %b') }}`, nil); got != "2026-03-07 14:05:09 07 March 2026 Mar" {
		t.Errorf("strftime_now: %q", got)
	}
}

func TestErrors(t *testing.T) {
	for _, src := range []string{`{% if %}`, `{% for x in %}{% endfor %}`, `{{ 'a' `, `{% endif %}`, `{% foo %}`, `{{ x[ }}`} {
		if _, err := Parse(src); err == nil {
			t.Errorf("%q parsed", src)
		}
	}
	tpl, _ := Parse(`{{ raise_exception('bad roles') }}`)
	_, err := tpl.Render(nil)
	var re *RaiseError
	if !errors.As(err, &re) || re.Message != "bad roles" {
		t.Errorf("raise_exception: %v", err)
	}
	for _, src := range []string{`{{ none.x }}`, `{{ none + 'a' }}`, `{{ 'a' in none }}`, `{{ x() }}`, `{% for x in none %}{% endfor %}`, `{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}`} {
		tpl, err := Parse(src)
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		if out, err := tpl.Render(nil); err == nil {
			t.Errorf("%q rendered %q, want an error", src, out)
		}
	}
	defer func(n int) { maxSteps = n }(maxSteps)
	maxSteps = 10000
	tpl, _ = Parse(`{% for i in range(100000) %}{% for j in range(1000) %}x{% endfor %}{% endfor %}`)
	if _, err := tpl.Render(nil); err == nil || !strings.Contains(err.Error(), "too much") {
		t.Errorf("runaway template: %v", err)
	}
}

// FuzzTemplate: no template source or variables make Parse or Render
// panic, and no render outgrows the limits (lowered, so the fuzzer's
// inputs finish fast; the abusive templates of bounds_test.go are seeds).
func FuzzTemplate(f *testing.F) {
	smallLimits(f)
	for _, s := range []string{`{% for m in messages %}{{ m.role }}{% endfor %}`, `{{ x | tojson(indent=2) }}`, `{% set ns = namespace(a=1) %}{{ ns.a[1:] }}`, `{%- if a is defined -%}{{ a.split()[0] }}{%- endif %}`} {
		f.Add(s)
	}
	for _, tc := range abusive {
		f.Add(tc.src)
	}
	f.Fuzz(func(t *testing.T, src string) {
		tpl, err := Parse(src)
		if err != nil {
			return
		}
		msgs, _ := FromJSON([]byte(`[{"role":"user","content":"hi"},{"role":"assistant","content":null}]`))
		out, err := tpl.Render(map[string]any{"messages": msgs, "x": "a b", "a": int64(3)})
		if err == nil && len(out) > maxOutput {
			t.Fatalf("rendered %d bytes, over the %d limit", len(out), maxOutput)
		}
	})
}

// FromJSON agrees with encoding/json on what it accepts and decodes
// (key order aside).
func FuzzFromJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5,"x\u00e9\ud83d\ude00",null,true]}`, `[]`, `"\ud800"`, `-0.5e3`, `{"a":{"b":{}}}`, `[1,]`, `01`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := FromJSON([]byte(s))
		var ref any
		refErr := json.Unmarshal([]byte(s), &ref)
		if (err == nil) != (refErr == nil) {
			t.Fatalf("%q: FromJSON error %v, encoding/json error %v", s, err, refErr)
		}
		if err != nil {
			return
		}
		var back any
		js, err := toJSON(v, jsonOpts{sortKeys: true}, 0)
		if err != nil {
			t.Fatalf("%q: re-encode: %v", s, err)
		}
		if err := json.Unmarshal([]byte(js), &back); err != nil {
			t.Fatalf("%q: re-encoded is not JSON: %v", s, err)
		}
		a, _ := json.Marshal(ref)
		b, _ := json.Marshal(back)
		if string(a) != string(b) && strings.ReplaceAll(string(a), "-0", "0") != strings.ReplaceAll(string(b), "-0", "0") {
			t.Fatalf("%q: decoded %s, encoding/json %s", s, b, a)
		}
	})
}
