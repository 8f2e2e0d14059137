package jinja

import "testing"

// Python Jinja2's output of values (expected strings printed by Debian's
// python3-jinja2 3.1.2): str() of None, booleans, floats, and the repr of
// lists and dicts, which templates print with |string or {{ }}.
func TestPythonStr(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{`{{ none }}|{{ [1, 'a', none, true, 1.0, {'k': "it's"}] }}|{{ 1e16 }}|{{ 0.00001 }}|{{ 1234567.5 }}`,
			`None|[1, 'a', None, True, 1.0, {'k': "it's"}]|1e+16|1e-05|1234567.5`},
		{`{{ x|string }}`, `{'tab': 'a\tb', 'nl': '\n', 'both': 'it\'s "q"', 'uni': 'Zürich 東京', 'ctl': '\x07'}`},
		{`{{ x|tojson }}`, `{"tab": "a\tb", "nl": "\n", "both": "it's \"q\"", "uni": "Zürich 東京", "ctl": "\u0007"}`},
		{`{{ 2.5|tojson }} {{ 3.0|tojson }} {{ [1.0, 1e20]|tojson }}`, `2.5 3.0 [1.0, 1e+20]`},
		{`{{ 'a' ~ none ~ true }}`, `aNoneTrue`},
	} {
		tpl, err := Parse(tc.src)
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		x, _ := FromJSON([]byte(`{"tab": "a\tb", "nl": "\n", "both": "it's \"q\"", "uni": "Zürich 東京", "ctl": "\u0007"}`))
		got, err := tpl.Render(map[string]any{"x": x, "tojson": nil})
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		if got != tc.want {
			t.Errorf("%s\n got  %s\n want %s", tc.src, got, tc.want)
		}
	}
}
