package jinja

import (
	"fmt"
	"html"
	"math"
	"math/bits"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Now is the clock of strftime_now (tests pin it).
var Now = time.Now

func arg(args []any, kw *Dict, i int, name string, def any) any {
	if i >= 0 && i < len(args) {
		return args[i]
	}
	if kw != nil {
		if v, ok := kw.Get(name); ok {
			return v
		}
	}
	return def
}

func globalFuncs() map[string]any {
	return map[string]any{
		"raise_exception": Func(func(args []any, kw *Dict) (any, error) {
			return nil, &RaiseError{Message: toString(arg(args, kw, 0, "message", ""))}
		}),
		"range": Func(func(args []any, _ *Dict) (any, error) {
			var a, b, st int64 = 0, 0, 1
			ints := make([]int64, len(args))
			for i, x := range args {
				v, ok := x.(int64)
				if !ok {
					return nil, errorf("range() takes integers, not %s", typeName(x))
				}
				ints[i] = v
			}
			switch len(ints) {
			case 1:
				b = ints[0]
			case 2:
				a, b = ints[0], ints[1]
			case 3:
				a, b, st = ints[0], ints[1], ints[2]
			default:
				return nil, errorf("range() takes 1 to 3 arguments")
			}
			if st == 0 {
				return nil, errorf("range() step must not be zero")
			}
			// The length is known before the list is built.
			n := uint64(0)
			switch {
			case st > 0 && a < b:
				n = (uint64(b-a) + uint64(st) - 1) / uint64(st)
			case st < 0 && a > b:
				n = (uint64(a-b) + uint64(-st) - 1) / uint64(-st)
			}
			if n > uint64(maxItems) {
				return nil, checkItems(-1)
			}
			l := &List{Items: make([]any, 0, n)}
			for i := a; (st > 0 && i < b) || (st < 0 && i > b); i += st {
				l.Items = append(l.Items, i)
				if len(l.Items) == int(n) {
					break // i += st could overflow past b
				}
			}
			return l, nil
		}),
		"namespace": Func(func(args []any, kw *Dict) (any, error) {
			ns := NewDict()
			ns.namespace = true
			if len(args) > 0 {
				if d, ok := args[0].(*Dict); ok {
					for _, k := range d.keys {
						ns.Set(k, d.m[k])
					}
				}
			}
			if kw != nil {
				for _, k := range kw.keys {
					ns.Set(k, kw.m[k])
				}
			}
			return ns, nil
		}),
		"dict": Func(func(args []any, kw *Dict) (any, error) {
			d := NewDict()
			if kw != nil {
				for _, k := range kw.keys {
					d.Set(k, kw.m[k])
				}
			}
			return d, nil
		}),
		"strftime_now": Func(func(args []any, kw *Dict) (any, error) {
			return strftime(Now(), toString(arg(args, kw, 0, "format", ""))), nil
		}),
	}
}

// strftime formats the directives chat templates use.
func strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 >= len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		switch f[i] {
		case 'Y':
			fmt.Fprintf(&b, "%04d", t.Year())
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case '-':
			if i+1 < len(f) && f[i+1] == 'd' {
				i++
				fmt.Fprintf(&b, "%d", t.Day())
			}
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			fmt.Fprintf(&b, "%02d", h)
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'b':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(f[i])
		}
	}
	return b.String()
}

// ---- tests ----

func runTest(r *renderer, name string, v any, args []any) (bool, error) {
	a0 := func() any {
		if len(args) > 0 {
			return args[0]
		}
		return Undefined{}
	}
	switch name {
	case "defined":
		_, u := v.(Undefined)
		return !u, nil
	case "undefined":
		_, u := v.(Undefined)
		return u, nil
	case "none":
		return v == nil, nil
	case "string":
		_, ok := v.(string)
		return ok, nil
	case "number":
		switch v.(type) {
		case int64, float64:
			return true, nil
		}
		return false, nil
	case "integer":
		_, ok := v.(int64)
		return ok, nil
	case "float":
		_, ok := v.(float64)
		return ok, nil
	case "boolean":
		_, ok := v.(bool)
		return ok, nil
	case "true":
		return v == true, nil
	case "false":
		return v == false, nil
	case "mapping":
		d, ok := v.(*Dict)
		return ok && !d.namespace, nil
	case "iterable", "sequence":
		switch v.(type) {
		case string, *List, *Dict:
			return true, nil
		}
		return false, nil
	case "callable":
		_, ok := v.(Func)
		return ok, nil
	case "odd", "even":
		i, ok := v.(int64)
		if !ok {
			return false, errorf("test %s needs an integer, got %s", name, typeName(v))
		}
		return (i%2 != 0) == (name == "odd"), nil
	case "divisibleby":
		i, ok1 := v.(int64)
		d, ok2 := a0().(int64)
		if !ok1 || !ok2 || d == 0 {
			return false, errorf("divisibleby needs integers")
		}
		return i%d == 0, nil
	case "equalto", "eq", "==", "sameas":
		return r.equal(v, a0()), nil
	case "ne", "!=":
		return !r.equal(v, a0()), nil
	case "lt", "<", "gt", ">", "le", "<=", "ge", ">=":
		op := map[string]string{"lt": "<", "gt": ">", "le": "<=", "ge": ">="}[name]
		if op == "" {
			op = name
		}
		r, err := binary(r, op, v, a0())
		if err != nil {
			return false, err
		}
		return r.(bool), nil
	case "in":
		return contains(r, a0(), v)
	case "lower":
		s, ok := v.(string)
		return ok && s == strings.ToLower(s), nil
	case "upper":
		s, ok := v.(string)
		return ok && s == strings.ToUpper(s), nil
	}
	return false, errorf("unknown test %q", name)
}

// ---- filters ----

func (s *scope) evalFilter(e *filterExpr) (any, error) {
	v, err := s.eval(e.e)
	if err != nil {
		return nil, err
	}
	args, err := s.evalList(e.args)
	if err != nil {
		return nil, err
	}
	kw, err := s.evalKwargs(e.kwargs)
	if err != nil {
		return nil, err
	}
	return s.filter(e.name, v, args, kw)
}

// needString is Jinja2's soft_str: the filters that work on text take
// str() of any other value (trim of None is "None").
func needString(filter string, v any) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	return toString(v), nil
}

func (s *scope) filter(name string, v any, args []any, kw *Dict) (any, error) {
	switch name {
	case "trim":
		str, err := needString(name, v)
		if err != nil {
			return nil, err
		}
		if c, ok := arg(args, kw, 0, "chars", nil).(string); ok {
			return strings.Trim(str, c), nil
		}
		return strings.TrimFunc(str, isSpace), nil
	case "length", "count":
		n, ok := length(v)
		if !ok {
			return nil, errorf("filter %s: %s has no length", name, typeName(v))
		}
		return int64(n), nil
	case "string":
		return toString(v), nil
	case "lower":
		return strings.ToLower(toString(v)), nil
	case "upper":
		return strings.ToUpper(toString(v)), nil
	case "capitalize":
		return capitalize(toString(v)), nil
	case "title":
		return title(toString(v)), nil
	case "replace":
		str := toString(v)
		n := -1
		if c, ok := arg(args, kw, 2, "count", nil).(int64); ok {
			n = int(c)
		}
		return replaceBounded(str, toString(arg(args, kw, 0, "old", "")), toString(arg(args, kw, 1, "new", "")), n)
	case "safe", "forceescape":
		return v, nil
	case "e", "escape":
		return html.EscapeString(toString(v)), nil
	case "default", "d":
		def := arg(args, kw, 0, "default_value", "")
		boolean := truthy(arg(args, kw, 1, "boolean", false))
		if _, u := v.(Undefined); u || (boolean && !truthy(v)) {
			return def, nil
		}
		return v, nil
	case "tojson":
		o := jsonOpts{}
		if n, ok := arg(args, kw, 0, "indent", nil).(int64); ok {
			o.indent = int(n)
		}
		o.ensureASCII = truthy(arg(nil, kw, -1, "ensure_ascii", false))
		o.sortKeys = truthy(arg(nil, kw, -1, "sort_keys", false))
		if sep, ok := arg(nil, kw, -1, "separators", nil).(*List); ok && len(sep.Items) == 2 {
			o.itemSep, o.keySep = toString(sep.Items[0]), toString(sep.Items[1])
		}
		return toJSON(v, o, 0)
	case "join":
		items, err := iterate(v)
		if err != nil {
			return nil, errorf("filter join: %v", err)
		}
		attr, hasAttr := arg(args, kw, 1, "attribute", nil).(string)
		if err := s.r.step(len(items)); err != nil {
			return nil, err
		}
		for i, x := range items {
			if hasAttr {
				x, _ = getAttr(s.r, x, attr)
			}
			items[i] = x
		}
		return joinBounded(items, toString(arg(args, kw, 0, "d", "")))
	case "first", "last":
		items, err := iterate(v)
		if err != nil {
			return nil, errorf("filter %s: %v", name, err)
		}
		if len(items) == 0 {
			return Undefined{}, nil
		}
		if name == "first" {
			return items[0], nil
		}
		return items[len(items)-1], nil
	case "list":
		items, err := iterate(v)
		if err != nil {
			return nil, errorf("filter list: %v", err)
		}
		if err := s.r.step(len(items)); err != nil {
			return nil, err
		}
		return &List{Items: append([]any{}, items...)}, nil
	case "reverse":
		if str, ok := v.(string); ok {
			rs := []rune(str)
			for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
				rs[i], rs[j] = rs[j], rs[i]
			}
			return string(rs), nil
		}
		items, err := iterate(v)
		if err != nil {
			return nil, errorf("filter reverse: %v", err)
		}
		out := make([]any, len(items))
		for i, x := range items {
			out[len(items)-1-i] = x
		}
		return &List{Items: out}, nil
	case "unique":
		items, err := iterate(v)
		if err != nil {
			return nil, errorf("filter unique: %v", err)
		}
		var out []any
		for _, x := range items {
			// Quadratic: every comparison is a step.
			if err := s.r.step(1 + len(out)); err != nil {
				return nil, err
			}
			dup := false
			for _, y := range out {
				dup = dup || s.r.equal(x, y)
			}
			if !dup {
				out = append(out, x)
			}
		}
		return &List{Items: out}, nil
	case "sort":
		items, err := iterate(v)
		if err != nil {
			return nil, errorf("filter sort: %v", err)
		}
		if err := s.r.step(len(items) * max(bits.Len(uint(len(items))), 1)); err != nil {
			return nil, err
		}
		rev := truthy(arg(args, kw, 0, "reverse", false))
		attr, hasAttr := arg(args, kw, 2, "attribute", nil).(string)
		fold := !truthy(arg(args, kw, 1, "case_sensitive", false))
		// Keys are made once per item (a lowered string is charged as
		// built), and every comparison costs steps by the bytes it may
		// read: once the budget is spent the comparisons stop reading and
		// the filter fails.
		type keyed struct{ item, key any }
		ks := make([]keyed, len(items))
		for i, x := range items {
			k := x
			if hasAttr {
				k, _ = getAttr(s.r, x, attr)
			}
			if str, ok := k.(string); ok && fold {
				k = strings.ToLower(str)
				if err := s.r.charge(int64(len(str))); err != nil {
					return nil, err
				}
			}
			ks[i] = keyed{x, k}
		}
		var cmpErr error
		sort.SliceStable(ks, func(i, j int) bool {
			if cmpErr != nil {
				return false
			}
			if err := s.r.step(compareCost(ks[i].key, ks[j].key)); err != nil {
				cmpErr = err
				return false
			}
			c, err := compare(ks[i].key, ks[j].key)
			if err != nil {
				cmpErr = err
			}
			if rev {
				return c > 0
			}
			return c < 0
		})
		if cmpErr != nil {
			return nil, cmpErr
		}
		out := make([]any, len(ks))
		for i := range ks {
			out[i] = ks[i].item
		}
		return &List{Items: out}, nil
	case "items":
		d, ok := v.(*Dict)
		if !ok {
			return nil, errorf("filter items: %s is not a mapping", typeName(v))
		}
		return dictItems(d), nil
	case "dictsort":
		d, ok := v.(*Dict)
		if !ok {
			return nil, errorf("filter dictsort: %s is not a mapping", typeName(v))
		}
		keys := append([]string{}, d.keys...)
		sort.Strings(keys)
		l := &List{}
		for _, k := range keys {
			l.Items = append(l.Items, &List{Items: []any{k, d.m[k]}})
		}
		return l, nil
	case "map":
		items, err := iterate(v)
		if err != nil {
			return nil, errorf("filter map: %v", err)
		}
		if err := s.r.step(len(items)); err != nil {
			return nil, err
		}
		out := make([]any, len(items))
		if attr, ok := arg(nil, kw, -1, "attribute", nil).(string); ok {
			def := arg(nil, kw, -1, "default", Undefined{})
			for i, x := range items {
				y, err := getAttr(s.r, x, attr)
				if err != nil {
					return nil, err
				}
				if _, u := y.(Undefined); u {
					y = def
				}
				out[i] = y
			}
			return &List{Items: out}, nil
		}
		if len(args) == 0 {
			return nil, errorf("filter map: needs a filter name or attribute=")
		}
		fname := toString(args[0])
		for i, x := range items {
			y, err := s.r.made(s.filter(fname, x, args[1:], nil))
			if err != nil {
				return nil, err
			}
			out[i] = y
		}
		return &List{Items: out}, nil
	case "select", "reject", "selectattr", "rejectattr":
		items, err := iterate(v)
		if err != nil {
			return nil, errorf("filter %s: %v", name, err)
		}
		byAttr := strings.HasSuffix(name, "attr")
		rest := args
		attr := ""
		if byAttr {
			if len(args) == 0 {
				return nil, errorf("filter %s: needs an attribute", name)
			}
			attr, rest = toString(args[0]), args[1:]
		}
		test := ""
		if len(rest) > 0 {
			test, rest = toString(rest[0]), rest[1:]
		}
		want := strings.HasPrefix(name, "select")
		if err := s.r.step(len(items)); err != nil {
			return nil, err
		}
		var out []any
		for _, x := range items {
			y := x
			if byAttr {
				if y, err = getAttr(s.r, x, attr); err != nil {
					return nil, err
				}
			}
			ok := truthy(y)
			if test != "" {
				if ok, err = runTest(s.r, test, y, rest); err != nil {
					return nil, err
				}
			}
			if ok == want {
				out = append(out, x)
			}
		}
		return &List{Items: out}, nil
	case "int":
		switch x := v.(type) {
		case int64:
			return x, nil
		case float64:
			return int64(x), nil
		case bool:
			return boolInt(x), nil
		case string:
			if i, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64); err == nil {
				return i, nil
			}
			if f, err := strconv.ParseFloat(strings.TrimSpace(x), 64); err == nil {
				return int64(f), nil
			}
		}
		return arg(args, kw, 0, "default", int64(0)), nil
	case "float":
		if f, ok := number(v); ok {
			return f, nil
		}
		if x, ok := v.(string); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(x), 64); err == nil {
				return f, nil
			}
		}
		return arg(args, kw, 0, "default", 0.0), nil
	case "abs":
		switch x := v.(type) {
		case int64:
			if x < 0 {
				return -x, nil
			}
			return x, nil
		case float64:
			return math.Abs(x), nil
		}
		return nil, errorf("filter abs: %s is not a number", typeName(v))
	case "round":
		f, ok := number(v)
		if !ok {
			return nil, errorf("filter round: %s is not a number", typeName(v))
		}
		p, _ := arg(args, kw, 0, "precision", int64(0)).(int64)
		m := math.Pow(10, float64(p))
		switch toString(arg(args, kw, 1, "method", "common")) {
		case "ceil":
			return math.Ceil(f*m) / m, nil
		case "floor":
			return math.Floor(f*m) / m, nil
		}
		return math.Round(f*m) / m, nil
	case "indent":
		str := toString(v)
		width := "    "
		switch w := arg(args, kw, 0, "width", int64(4)).(type) {
		case int64:
			if err := checkLen(w); err != nil {
				return nil, err
			}
			width = strings.Repeat(" ", int(max(w, 0)))
		case string:
			width = w
		}
		first := truthy(arg(args, kw, 1, "first", false))
		blank := truthy(arg(args, kw, 2, "blank", false))
		lines := strings.Split(str, "\n")
		grow := repeatSize(len(width), int64(len(lines)), maxValue+1)
		if err := checkLen(int64(len(str)) + grow); err != nil || grow < 0 {
			return nil, checkLen(-1)
		}
		for i, l := range lines {
			if (i == 0 && !first) || (l == "" && !blank) {
				continue
			}
			lines[i] = width + l
		}
		return strings.Join(lines, "\n"), nil
	case "attr":
		return getAttr(s.r, v, toString(arg(args, kw, 0, "name", "")))
	case "max", "min", "sum":
		items, err := iterate(v)
		if err != nil {
			return nil, errorf("filter %s: %v", name, err)
		}
		if err := s.r.step(len(items)); err != nil {
			return nil, err
		}
		if name == "sum" {
			var acc any = int64(0)
			for _, x := range items {
				if acc, err = arith("+", acc, x); err != nil {
					return nil, err
				}
			}
			return acc, nil
		}
		if len(items) == 0 {
			return Undefined{}, nil
		}
		best := items[0]
		for _, x := range items[1:] {
			c, err := compare(x, best)
			if err != nil {
				return nil, err
			}
			if (name == "max" && c > 0) || (name == "min" && c < 0) {
				best = x
			}
		}
		return best, nil
	case "wordcount":
		return int64(countFields(toString(v))), nil
	}
	return nil, errorf("unknown filter %q", name)
}

func dictItems(d *Dict) *List {
	l := &List{Items: make([]any, len(d.keys))}
	for i, k := range d.keys {
		l.Items[i] = &List{Items: []any{k, d.m[k]}}
	}
	return l
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + strings.ToLower(s[n:])
}

func title(s string) string {
	var b strings.Builder
	prevLetter := false
	for _, r := range s {
		if unicode.IsLetter(r) {
			if prevLetter {
				b.WriteRune(unicode.ToLower(r))
			} else {
				b.WriteRune(unicode.ToUpper(r))
			}
			prevLetter = true
		} else {
			b.WriteRune(r)
			prevLetter = false
		}
	}
	return b.String()
}

// ---- methods ----

func stringMethod(s string, name string) Func {
	str := func(args []any, kw *Dict, i int, n string) (string, bool) {
		v, ok := arg(args, kw, i, n, nil).(string)
		return v, ok
	}
	switch name {
	case "startswith", "endswith":
		return func(args []any, kw *Dict) (any, error) {
			check := strings.HasPrefix
			if name == "endswith" {
				check = strings.HasSuffix
			}
			switch p := arg(args, kw, 0, "prefix", nil).(type) {
			case string:
				return check(s, p), nil
			case *List:
				for _, x := range p.Items {
					if xs, ok := x.(string); ok && check(s, xs) {
						return true, nil
					}
				}
				return false, nil
			}
			return nil, errorf("%s: want a string or a tuple of strings", name)
		}
	case "strip", "lstrip", "rstrip":
		return func(args []any, kw *Dict) (any, error) {
			chars, ok := str(args, kw, 0, "chars")
			switch {
			case ok && name == "strip":
				return strings.Trim(s, chars), nil
			case ok && name == "lstrip":
				return strings.TrimLeft(s, chars), nil
			case ok:
				return strings.TrimRight(s, chars), nil
			case name == "strip":
				return strings.TrimFunc(s, unicode.IsSpace), nil
			case name == "lstrip":
				return strings.TrimLeftFunc(s, unicode.IsSpace), nil
			}
			return strings.TrimRightFunc(s, unicode.IsSpace), nil
		}
	case "split", "rsplit":
		return func(args []any, kw *Dict) (any, error) {
			sep, hasSep := str(args, kw, 0, "sep")
			maxSplit := int64(-1)
			if m, ok := arg(args, kw, 1, "maxsplit", nil).(int64); ok {
				maxSplit = m
			}
			// The pieces are counted before the list is built.
			pieces := int64(strings.Count(s, sep)) + 1
			if !hasSep {
				pieces = int64(countFields(s))
			}
			if maxSplit >= 0 {
				pieces = min(pieces, maxSplit+1)
			}
			if err := checkItems(pieces); err != nil {
				return nil, err
			}
			var parts []string
			switch {
			case !hasSep:
				parts = strings.Fields(s)
				if maxSplit >= 0 && int64(len(parts)) > maxSplit+1 {
					// re-split keeping the tail intact
					parts = splitWhitespaceN(s, int(maxSplit), name == "rsplit")
				}
			case sep == "":
				return nil, errorf("%s: empty separator", name)
			case maxSplit < 0:
				parts = strings.Split(s, sep)
			case name == "split":
				parts = strings.SplitN(s, sep, int(maxSplit)+1)
			default:
				parts = rsplitN(s, sep, int(maxSplit))
			}
			l := &List{Items: make([]any, len(parts))}
			for i, p := range parts {
				l.Items[i] = p
			}
			return l, nil
		}
	case "splitlines":
		return func([]any, *Dict) (any, error) {
			if err := checkItems(int64(strings.Count(s, "\n")) + 1); err != nil {
				return nil, err
			}
			l := &List{}
			for _, p := range strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n") {
				l.Items = append(l.Items, p)
			}
			if n := len(l.Items); n > 0 && l.Items[n-1] == "" {
				l.Items = l.Items[:n-1]
			}
			return l, nil
		}
	case "lower":
		return func([]any, *Dict) (any, error) { return strings.ToLower(s), nil }
	case "upper":
		return func([]any, *Dict) (any, error) { return strings.ToUpper(s), nil }
	case "title":
		return func([]any, *Dict) (any, error) { return title(s), nil }
	case "capitalize":
		return func([]any, *Dict) (any, error) { return capitalize(s), nil }
	case "replace":
		return func(args []any, kw *Dict) (any, error) {
			n := -1
			if c, ok := arg(args, kw, 2, "count", nil).(int64); ok {
				n = int(c)
			}
			return replaceBounded(s, toString(arg(args, kw, 0, "old", "")), toString(arg(args, kw, 1, "new", "")), n)
		}
	case "find", "rfind", "index", "rindex":
		return func(args []any, kw *Dict) (any, error) {
			sub := toString(arg(args, kw, 0, "sub", ""))
			var i int
			if strings.HasPrefix(name, "r") {
				i = strings.LastIndex(s, sub)
			} else {
				i = strings.Index(s, sub)
			}
			if i < 0 {
				if strings.HasSuffix(name, "index") {
					return nil, errorf("substring not found")
				}
				return int64(-1), nil
			}
			return int64(utf8.RuneCountInString(s[:i])), nil
		}
	case "count":
		return func(args []any, kw *Dict) (any, error) {
			return int64(strings.Count(s, toString(arg(args, kw, 0, "sub", "")))), nil
		}
	case "join":
		return func(args []any, kw *Dict) (any, error) {
			items, err := iterate(arg(args, kw, 0, "iterable", &List{}))
			if err != nil {
				return nil, err
			}
			return joinBounded(items, s)
		}
	case "removeprefix":
		return func(args []any, kw *Dict) (any, error) {
			return strings.TrimPrefix(s, toString(arg(args, kw, 0, "prefix", ""))), nil
		}
	case "removesuffix":
		return func(args []any, kw *Dict) (any, error) {
			return strings.TrimSuffix(s, toString(arg(args, kw, 0, "suffix", ""))), nil
		}
	case "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper":
		return func([]any, *Dict) (any, error) {
			if s == "" {
				return false, nil
			}
			cased := false
			for _, r := range s {
				var ok bool
				switch name {
				case "isdigit":
					ok = unicode.IsDigit(r)
				case "isalpha":
					ok = unicode.IsLetter(r)
				case "isalnum":
					ok = unicode.IsLetter(r) || unicode.IsDigit(r)
				case "isspace":
					ok = unicode.IsSpace(r)
				case "islower":
					ok = !unicode.IsUpper(r)
					cased = cased || unicode.IsLower(r)
				case "isupper":
					ok = !unicode.IsLower(r)
					cased = cased || unicode.IsUpper(r)
				}
				if !ok {
					return false, nil
				}
			}
			if name == "islower" || name == "isupper" {
				return cased, nil
			}
			return true, nil
		}
	case "format":
		return func(args []any, kw *Dict) (any, error) {
			var b strings.Builder
			next := 0
			for i := 0; i < len(s); i++ {
				switch {
				case strings.HasPrefix(s[i:], "{{"):
					b.WriteByte('{')
					i++
				case strings.HasPrefix(s[i:], "}}"):
					b.WriteByte('}')
					i++
				case s[i] == '{':
					end := strings.IndexByte(s[i:], '}')
					if end < 0 {
						return nil, errorf("format: unmatched '{'")
					}
					field := s[i+1 : i+end]
					var v any = Undefined{}
					if field == "" {
						if next < len(args) {
							v = args[next]
						}
						next++
					} else if n, err := strconv.Atoi(field); err == nil && n < len(args) {
						v = args[n]
					} else if kw != nil {
						v, _ = kw.Get(field)
					}
					if err := checkLen(int64(b.Len()) + int64(len(toString(v)))); err != nil {
						return nil, err
					}
					b.WriteString(toString(v))
					i += end
				default:
					b.WriteByte(s[i])
				}
			}
			return b.String(), nil
		}
	}
	return nil
}

func splitWhitespaceN(s string, n int, fromRight bool) []string {
	fields := strings.Fields(s)
	if len(fields) <= n+1 {
		return fields
	}
	if !fromRight {
		// the first n fields, then the rest of the string (left-trimmed)
		rest := s
		for i := 0; i < n; i++ {
			rest = strings.TrimLeftFunc(rest, unicode.IsSpace)
			rest = rest[len(fields[i]):]
		}
		return append(fields[:n:n], strings.TrimLeftFunc(rest, unicode.IsSpace))
	}
	rest := s
	for i := 0; i < n; i++ {
		rest = strings.TrimRightFunc(rest, unicode.IsSpace)
		rest = rest[:len(rest)-len(fields[len(fields)-1-i])]
	}
	return append([]string{strings.TrimRightFunc(rest, unicode.IsSpace)}, fields[len(fields)-n:]...)
}

func rsplitN(s, sep string, n int) []string {
	var out []string
	for n > 0 {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		out = append([]string{s[i+len(sep):]}, out...)
		s = s[:i]
		n--
	}
	return append([]string{s}, out...)
}

func listMethod(r *renderer, l *List, name string) Func {
	switch name {
	case "append":
		return func(args []any, _ *Dict) (any, error) {
			if len(args) != 1 {
				return nil, errorf("append takes one argument")
			}
			if err := checkItems(int64(len(l.Items)) + 1); err != nil {
				return nil, err
			}
			l.Items = append(l.Items, args[0])
			return nil, nil
		}
	case "extend":
		return func(args []any, _ *Dict) (any, error) {
			if len(args) != 1 {
				return nil, errorf("extend takes one argument")
			}
			items, err := iterate(args[0])
			if err != nil {
				return nil, err
			}
			if err := checkItems(int64(len(l.Items)) + int64(len(items))); err != nil {
				return nil, err
			}
			l.Items = append(l.Items, items...)
			return nil, nil
		}
	case "insert":
		return func(args []any, _ *Dict) (any, error) {
			i, ok := arg(args, nil, 0, "", nil).(int64)
			if !ok || len(args) != 2 {
				return nil, errorf("insert takes an index and a value")
			}
			if i < 0 {
				i += int64(len(l.Items))
			}
			i = max(0, min(i, int64(len(l.Items))))
			if err := checkItems(int64(len(l.Items)) + 1); err != nil {
				return nil, err
			}
			l.Items = append(l.Items[:i], append([]any{args[1]}, l.Items[i:]...)...)
			return nil, nil
		}
	case "pop":
		return func(args []any, _ *Dict) (any, error) {
			if len(l.Items) == 0 {
				return nil, errorf("pop from empty list")
			}
			i := int64(len(l.Items) - 1)
			if x, ok := arg(args, nil, 0, "", nil).(int64); ok {
				i = x
				if i < 0 {
					i += int64(len(l.Items))
				}
			}
			if i < 0 || i >= int64(len(l.Items)) {
				return nil, errorf("pop index out of range")
			}
			v := l.Items[i]
			l.Items = append(l.Items[:i], l.Items[i+1:]...)
			return v, nil
		}
	case "index", "count":
		return func(args []any, _ *Dict) (any, error) {
			x := arg(args, nil, 0, "", Undefined{})
			n := int64(0)
			for i, y := range l.Items {
				if r.equal(x, y) {
					if name == "index" {
						return int64(i), nil
					}
					n++
				}
			}
			if name == "index" {
				return nil, errorf("value is not in list")
			}
			return n, nil
		}
	case "copy":
		return func([]any, *Dict) (any, error) { return &List{Items: append([]any{}, l.Items...)}, nil }
	}
	return nil
}

func dictMethod(d *Dict, name string) Func {
	switch name {
	case "items":
		return func([]any, *Dict) (any, error) { return dictItems(d), nil }
	case "keys":
		return func([]any, *Dict) (any, error) {
			l := &List{}
			for _, k := range d.keys {
				l.Items = append(l.Items, k)
			}
			return l, nil
		}
	case "values":
		return func([]any, *Dict) (any, error) {
			l := &List{}
			for _, k := range d.keys {
				l.Items = append(l.Items, d.m[k])
			}
			return l, nil
		}
	case "get":
		return func(args []any, kw *Dict) (any, error) {
			if v, ok := d.Get(toString(arg(args, kw, 0, "key", ""))); ok {
				return v, nil
			}
			return arg(args, kw, 1, "default", nil), nil
		}
	case "pop":
		return func(args []any, kw *Dict) (any, error) {
			k := toString(arg(args, kw, 0, "key", ""))
			if v, ok := d.Get(k); ok {
				d.delete(k)
				return v, nil
			}
			if len(args) > 1 {
				return args[1], nil
			}
			return nil, errorf("key %q not found", k)
		}
	case "setdefault":
		return func(args []any, kw *Dict) (any, error) {
			k := toString(arg(args, kw, 0, "key", ""))
			if v, ok := d.Get(k); ok {
				return v, nil
			}
			v := arg(args, kw, 1, "default", nil)
			d.Set(k, v)
			return v, nil
		}
	case "update":
		return func(args []any, kw *Dict) (any, error) {
			if len(args) > 0 {
				if o, ok := args[0].(*Dict); ok {
					for _, k := range o.keys {
						d.Set(k, o.m[k])
					}
				}
			}
			if kw != nil {
				for _, k := range kw.keys {
					d.Set(k, kw.m[k])
				}
			}
			return nil, nil
		}
	case "copy":
		return func([]any, *Dict) (any, error) {
			c := NewDict()
			for _, k := range d.keys {
				c.Set(k, d.m[k])
			}
			return c, nil
		}
	}
	return nil
}

// joinBounded joins the items' strings with sep, refusing (before
// building it) a result over maxValue bytes.
func joinBounded(items []any, sep string) (string, error) {
	parts := make([]string, len(items))
	size := int64(0)
	for i, x := range items {
		parts[i] = toString(x)
		size += int64(len(parts[i]))
		if i > 0 {
			size += int64(len(sep))
		}
		if err := checkLen(size); err != nil {
			return "", err
		}
	}
	return strings.Join(parts, sep), nil
}

// replaceBounded is strings.Replace refusing (before building it) a
// result over maxValue bytes: an empty or short old with a long new
// multiplies the text.
func replaceBounded(s, old, repl string, n int) (string, error) {
	if len(repl) > len(old) {
		count := int64(strings.Count(s, old))
		if n >= 0 {
			count = min(count, int64(n))
		}
		grow := repeatSize(len(repl)-len(old), count, maxValue+1)
		if err := checkLen(int64(len(s)) + grow); err != nil || grow < 0 {
			return "", checkLen(-1)
		}
	}
	return strings.Replace(s, old, repl, n), nil
}

// countFields is len(strings.Fields(s)) without building the fields.
func countFields(s string) int {
	n, in := 0, false
	for _, r := range s {
		space := unicode.IsSpace(r)
		if !space && !in {
			n++
		}
		in = !space
	}
	return n
}
