package jinja

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// Template is a parsed template. It is safe for concurrent use.
type Template struct {
	body []node
}

// Parse parses a template.
func Parse(src string) (*Template, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	body, err := parse(toks)
	if err != nil {
		return nil, err
	}
	return &Template{body: body}, nil
}

// RaiseError is raise_exception(message) called by the template.
type RaiseError struct{ Message string }

func (e *RaiseError) Error() string { return e.Message }

// RenderError is a template that failed while rendering.
type RenderError struct{ Msg string }

func (e *RenderError) Error() string { return e.Msg }

func errorf(format string, args ...any) error {
	return &RenderError{Msg: fmt.Sprintf(format, args...)}
}

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

type scope struct {
	vars   map[string]any
	parent *scope
	r      *renderer
}

func (s *scope) lookup(name string) any {
	for c := s; c != nil; c = c.parent {
		if v, ok := c.vars[name]; ok {
			return v
		}
	}
	return Undefined{}
}

// child is a nested scope; its map is made on the first set (most loop
// iterations only bind the loop variables).
func (s *scope) child() *scope { return &scope{parent: s, r: s.r} }

func (s *scope) set(name string, v any) {
	if s.vars == nil {
		s.vars = make(map[string]any, 4)
	}
	s.vars[name] = v
}

// Render renders the template with the given variables (template values:
// see FromJSON and FromGo) on top of the globals (range, namespace,
// raise_exception, strftime_now, ...).
func (t *Template) Render(vars map[string]any) (string, error) {
	var b strings.Builder
	r := &renderer{out: &b}
	timer := time.AfterFunc(renderTimeout, func() { r.expired.Store(true) })
	defer timer.Stop()
	globals := &scope{vars: globalFuncs(), r: r}
	sc := globals.child()
	for k, v := range vars {
		sc.set(k, FromGo(v))
	}
	if err := sc.exec(t.body, &b); err != nil {
		if errors.Is(err, errBreak) || errors.Is(err, errContinue) {
			return "", errorf("break or continue outside a loop")
		}
		return "", err
	}
	if b.Len() > maxOutput {
		return "", errorf("template output is over %d bytes", maxOutput)
	}
	// Comparisons spend steps without failing at once (they answer
	// "unequal" once the budget is gone): a render that spent it fails.
	if err := r.step(0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func (s *scope) exec(nodes []node, out *strings.Builder) error {
	for _, n := range nodes {
		if err := s.r.step(1); err != nil {
			return err
		}
		if out.Len() > maxOutput {
			return errorf("template output is over %d bytes", maxOutput)
		}
		switch n := n.(type) {
		case *textNode:
			out.WriteString(n.s)
		case *outputNode:
			v, err := s.eval(n.e)
			if err != nil {
				return err
			}
			out.WriteString(toString(v))
		case *ifNode:
			done := false
			for i, c := range n.conds {
				v, err := s.eval(c)
				if err != nil {
					return err
				}
				if truthy(v) {
					if err := s.exec(n.bodies[i], out); err != nil {
						return err
					}
					done = true
					break
				}
			}
			if !done && n.els != nil {
				if err := s.exec(n.els, out); err != nil {
					return err
				}
			}
		case *forNode:
			if err := s.execFor(n, out); err != nil {
				return err
			}
		case *setNode:
			if err := s.execSet(n); err != nil {
				return err
			}
		case *macroNode:
			s.set(n.name, s.macro(n.params, n.body, nil))
		case *callBlockNode:
			call, ok := n.call.(*callExpr)
			if !ok {
				return errorf("call block: expected a macro call")
			}
			caller := s.macro(nil, n.body, nil)
			c := s.child()
			c.set("caller", caller)
			v, err := c.eval(call)
			if err != nil {
				return err
			}
			out.WriteString(toString(v))
		case *filterBlockNode:
			var b strings.Builder
			if err := s.exec(n.body, &b); err != nil {
				return err
			}
			f := *n.filter
			f.e = &literal{b.String()}
			v, err := s.eval(&f)
			if err != nil {
				return err
			}
			out.WriteString(toString(v))
		case *breakNode:
			return errBreak
		case *continueNode:
			return errContinue
		}
	}
	return nil
}

func (s *scope) execSet(n *setNode) error {
	var v any
	var err error
	if n.body != nil {
		var b strings.Builder
		if err := s.exec(n.body, &b); err != nil {
			return err
		}
		v = b.String()
	} else if v, err = s.eval(n.value); err != nil {
		return err
	}
	if n.obj != "" {
		ns, ok := s.lookup(n.obj).(*Dict)
		if !ok || !ns.namespace {
			return errorf("cannot set attribute %q of %s %q: only a namespace() takes attributes", n.attr, typeName(s.lookup(n.obj)), n.obj)
		}
		ns.Set(n.attr, v)
		return nil
	}
	if len(n.names) == 1 {
		s.set(n.names[0], v)
		return nil
	}
	items, err := iterate(v)
	if err != nil {
		return err
	}
	if len(items) != len(n.names) {
		return errorf("cannot unpack %d values into %d names", len(items), len(n.names))
	}
	for i, name := range n.names {
		s.set(name, items[i])
	}
	return nil
}

func (s *scope) execFor(n *forNode, out *strings.Builder) error {
	it, err := s.eval(n.iter)
	if err != nil {
		return err
	}
	items, err := iterate(it)
	if err != nil {
		return err
	}
	bind := func(c *scope, item any) error {
		if len(n.vars) == 1 {
			c.set(n.vars[0], item)
			return nil
		}
		parts, err := iterate(item)
		if err != nil || len(parts) != len(n.vars) {
			return errorf("for: cannot unpack %s into %d names", typeName(item), len(n.vars))
		}
		for i, v := range n.vars {
			c.set(v, parts[i])
		}
		return nil
	}
	if n.cond != nil {
		var kept []any
		for _, item := range items {
			if err := s.r.step(1); err != nil {
				return err
			}
			c := s.child()
			if err := bind(c, item); err != nil {
				return err
			}
			v, err := c.eval(n.cond)
			if err != nil {
				return err
			}
			if truthy(v) {
				kept = append(kept, item)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		if n.els != nil {
			return s.exec(n.els, out)
		}
		return nil
	}
	for i, item := range items {
		// Every iteration costs a step, so a loop with an empty body
		// (or one whose body only nests more loops) is counted too.
		if err := s.r.step(1); err != nil {
			return err
		}
		c := s.child()
		loop := &loopInfo{i: i, items: items}
		c.set("loop", loop)
		if err := bind(c, item); err != nil {
			return err
		}
		err := c.exec(n.body, out)
		if errors.Is(err, errBreak) {
			break
		}
		if err != nil && !errors.Is(err, errContinue) {
			return err
		}
	}
	return nil
}

// macro makes a callable of a macro body.
func (s *scope) macro(params []param, body []node, _ any) Func {
	def := s
	return func(args []any, kwargs *Dict) (any, error) {
		def.r.depth++
		defer func() { def.r.depth-- }()
		if def.r.depth > maxDepth {
			return nil, errorf("macro recursion deeper than %d", maxDepth)
		}
		c := def.child()
		for i, p := range params {
			switch {
			case i < len(args):
				c.set(p.name, args[i])
			case kwargs != nil && hasKey(kwargs, p.name):
				v, _ := kwargs.Get(p.name)
				c.set(p.name, v)
			case p.def != nil:
				v, err := c.eval(p.def)
				if err != nil {
					return nil, err
				}
				c.set(p.name, v)
			default:
				c.set(p.name, Undefined{})
			}
		}
		varargs := &List{}
		if len(args) > len(params) {
			varargs.Items = args[len(params):]
		}
		c.set("varargs", varargs)
		var b strings.Builder
		if err := c.exec(body, &b); err != nil {
			return nil, err
		}
		return b.String(), nil
	}
}

func hasKey(d *Dict, k string) bool { _, ok := d.Get(k); return ok }

// iterate lists what a for loop visits: list items, dict keys, string
// characters.
func iterate(v any) ([]any, error) {
	switch v := v.(type) {
	case *List:
		return v.Items, nil
	case *Dict:
		out := make([]any, len(v.keys))
		for i, k := range v.keys {
			out[i] = k
		}
		return out, nil
	case string:
		n := utf8.RuneCountInString(v)
		if err := checkItems(int64(n)); err != nil {
			return nil, err
		}
		out := make([]any, 0, n)
		for _, r := range v {
			out = append(out, string(r))
		}
		return out, nil
	case nil, Undefined:
		return nil, errorf("%s is not iterable", typeName(v))
	}
	return nil, errorf("%s is not iterable", typeName(v))
}

// ---- expressions ----

func (s *scope) eval(e expr) (any, error) {
	switch e := e.(type) {
	case *literal:
		return e.v, nil
	case *nameExpr:
		return s.lookup(e.name), nil
	case *attrExpr:
		obj, err := s.eval(e.obj)
		if err != nil {
			return nil, err
		}
		return getAttr(s.r, obj, e.name)
	case *indexExpr:
		obj, err := s.eval(e.obj)
		if err != nil {
			return nil, err
		}
		key, err := s.eval(e.key)
		if err != nil {
			return nil, err
		}
		return getItem(obj, key)
	case *sliceExpr:
		return s.r.made(s.evalSlice(e))
	case *callExpr:
		// Calls, filters and operators are steps: one expression can
		// hold many, so the budget and the time limit are checked
		// within a statement too.
		if err := s.r.step(1); err != nil {
			return nil, err
		}
		return s.r.made(s.evalCall(e))
	case *filterExpr:
		if err := s.r.step(1); err != nil {
			return nil, err
		}
		return s.r.made(s.evalFilter(e))
	case *testExpr:
		v, err := s.eval(e.e)
		if err != nil {
			return nil, err
		}
		args, err := s.evalList(e.args)
		if err != nil {
			return nil, err
		}
		ok, err := runTest(s.r, e.name, v, args)
		if err != nil {
			return nil, err
		}
		return ok != e.negate, nil
	case *unaryExpr:
		v, err := s.eval(e.e)
		if err != nil {
			return nil, err
		}
		switch e.op {
		case "not":
			return !truthy(v), nil
		case "-":
			switch x := v.(type) {
			case int64:
				return -x, nil
			case float64:
				return -x, nil
			}
			return nil, errorf("bad operand type for unary -: %s", typeName(v))
		case "+":
			return v, nil
		}
	case *binaryExpr:
		if err := s.r.step(1); err != nil {
			return nil, err
		}
		return s.r.made(s.evalBinary(e))
	case *condExpr:
		c, err := s.eval(e.cond)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return s.eval(e.then)
		}
		if e.els == nil {
			return Undefined{}, nil
		}
		return s.eval(e.els)
	case *listExpr:
		items, err := s.evalList(e.items)
		if err != nil {
			return nil, err
		}
		return s.r.made(&List{Items: items}, nil)
	case *dictExpr:
		d := NewDict()
		for i := range e.keys {
			k, err := s.eval(e.keys[i])
			if err != nil {
				return nil, err
			}
			v, err := s.eval(e.vals[i])
			if err != nil {
				return nil, err
			}
			d.Set(toString(k), v)
		}
		return s.r.made(d, nil)
	}
	return nil, errorf("cannot evaluate %T", e)
}

func (s *scope) evalList(es []expr) ([]any, error) {
	out := make([]any, len(es))
	for i, e := range es {
		v, err := s.eval(e)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (s *scope) evalKwargs(kw []kwarg) (*Dict, error) {
	if len(kw) == 0 {
		return nil, nil
	}
	d := NewDict()
	for _, k := range kw {
		v, err := s.eval(k.e)
		if err != nil {
			return nil, err
		}
		d.Set(k.name, v)
	}
	return d, nil
}

func getAttr(r *renderer, obj any, name string) (any, error) {
	switch o := obj.(type) {
	case *Dict:
		if v, ok := o.Get(name); ok {
			return v, nil
		}
		if m := dictMethod(o, name); m != nil && !o.namespace {
			return m, nil
		}
		return Undefined{}, nil
	case *loopInfo:
		return o.attr(name), nil
	case string:
		if m := stringMethod(o, name); m != nil {
			return m, nil
		}
	case *List:
		if m := listMethod(r, o, name); m != nil {
			return m, nil
		}
	case nil:
		return nil, errorf("cannot read attribute %q of none", name)
	case Undefined:
		return Undefined{}, nil
	}
	return Undefined{}, nil
}

func getItem(obj, key any) (any, error) {
	switch o := obj.(type) {
	case *Dict:
		if k, ok := key.(string); ok {
			if v, ok := o.Get(k); ok {
				return v, nil
			}
			return Undefined{}, nil
		}
		if v, ok := o.Get(toString(key)); ok {
			return v, nil
		}
		return Undefined{}, nil
	case *List:
		i, ok := key.(int64)
		if !ok {
			return nil, errorf("list indices must be integers, not %s", typeName(key))
		}
		if i < 0 {
			i += int64(len(o.Items))
		}
		if i < 0 || i >= int64(len(o.Items)) {
			return Undefined{}, nil
		}
		return o.Items[i], nil
	case string:
		i, ok := key.(int64)
		if !ok {
			return nil, errorf("string indices must be integers, not %s", typeName(key))
		}
		rs := []rune(o)
		if i < 0 {
			i += int64(len(rs))
		}
		if i < 0 || i >= int64(len(rs)) {
			return Undefined{}, nil
		}
		return string(rs[i]), nil
	case nil:
		return nil, errorf("none is not subscriptable")
	case Undefined:
		return Undefined{}, nil
	}
	return nil, errorf("%s is not subscriptable", typeName(obj))
}

func (s *scope) evalSlice(e *sliceExpr) (any, error) {
	obj, err := s.eval(e.obj)
	if err != nil {
		return nil, err
	}
	bound := func(x expr) (*int64, error) {
		if x == nil {
			return nil, nil
		}
		v, err := s.eval(x)
		if err != nil {
			return nil, err
		}
		switch v := v.(type) {
		case int64:
			return &v, nil
		case nil, Undefined:
			return nil, nil
		}
		return nil, errorf("slice indices must be integers")
	}
	lo, err := bound(e.lo)
	if err != nil {
		return nil, err
	}
	hi, err := bound(e.hi)
	if err != nil {
		return nil, err
	}
	step, err := bound(e.step)
	if err != nil {
		return nil, err
	}
	var items []any
	str := false
	switch o := obj.(type) {
	case *List:
		items = o.Items
	case string:
		str = true
		if items, err = iterate(o); err != nil {
			return nil, err
		}
	default:
		return nil, errorf("%s cannot be sliced", typeName(obj))
	}
	idx := sliceIndices(len(items), lo, hi, step)
	if idx == nil && step != nil && *step == 0 {
		return nil, errorf("slice step cannot be zero")
	}
	if str {
		var b strings.Builder
		for _, i := range idx {
			b.WriteString(items[i].(string))
		}
		return b.String(), nil
	}
	out := make([]any, len(idx))
	for k, i := range idx {
		out[k] = items[i]
	}
	return &List{Items: out}, nil
}

// sliceIndices is Python's slice semantics.
func sliceIndices(n int, lo, hi, step *int64) []int {
	st := int64(1)
	if step != nil {
		st = *step
	}
	if st == 0 {
		return nil
	}
	clamp := func(p *int64, def int64, lowLim, highLim int64) int64 {
		if p == nil {
			return def
		}
		v := *p
		if v < 0 {
			v += int64(n)
			if v < lowLim {
				v = lowLim
			}
		} else if v > highLim {
			v = highLim
		}
		return v
	}
	var out []int
	if st > 0 {
		a, b := clamp(lo, 0, 0, int64(n)), clamp(hi, int64(n), 0, int64(n))
		for i := a; i < b; i += st {
			out = append(out, int(i))
		}
	} else {
		a, b := clamp(lo, int64(n)-1, -1, int64(n)-1), clamp(hi, -1, -1, int64(n)-1)
		if hi == nil {
			b = -1
		}
		for i := a; i > b; i += st {
			out = append(out, int(i))
		}
	}
	if out == nil {
		out = []int{}
	}
	return out
}

func (s *scope) evalCall(e *callExpr) (any, error) {
	fn, err := s.eval(e.fn)
	if err != nil {
		return nil, err
	}
	args, err := s.evalList(e.args)
	if err != nil {
		return nil, err
	}
	kwargs, err := s.evalKwargs(e.kwargs)
	if err != nil {
		return nil, err
	}
	f, ok := fn.(Func)
	if !ok {
		what := "value"
		switch x := e.fn.(type) {
		case *nameExpr:
			what = x.name
		case *attrExpr:
			what = x.name
		}
		return nil, errorf("%s (%s) is not callable", what, typeName(fn))
	}
	return f(args, kwargs)
}

func (s *scope) evalBinary(e *binaryExpr) (any, error) {
	l, err := s.eval(e.l)
	if err != nil {
		return nil, err
	}
	switch e.op {
	case "and":
		if !truthy(l) {
			return l, nil
		}
		return s.eval(e.r)
	case "or":
		if truthy(l) {
			return l, nil
		}
		return s.eval(e.r)
	}
	r, err := s.eval(e.r)
	if err != nil {
		return nil, err
	}
	return binary(s.r, e.op, l, r)
}

func binary(rd *renderer, op string, l, r any) (any, error) {
	switch op {
	case "==", "!=", "in", "not in", "<", ">", "<=", ">=":
		// These read their strings: long ones cost steps by length.
		if err := rd.step(compareCost(l, r) - 1); err != nil {
			return nil, err
		}
	}
	switch op {
	case "==":
		return rd.equal(l, r), nil
	case "!=":
		return !rd.equal(l, r), nil
	case "in", "not in":
		ok, err := contains(rd, r, l)
		if err != nil {
			return nil, err
		}
		return ok == (op == "in"), nil
	case "~":
		a, b := toString(l), toString(r)
		if err := checkLen(int64(len(a)) + int64(len(b))); err != nil {
			return nil, err
		}
		return a + b, nil
	case "<", ">", "<=", ">=":
		c, err := compare(l, r)
		if err != nil {
			return nil, err
		}
		switch op {
		case "<":
			return c < 0, nil
		case ">":
			return c > 0, nil
		case "<=":
			return c <= 0, nil
		}
		return c >= 0, nil
	case "+":
		// Python: str + str and list + list; a string added to anything
		// else is a TypeError (an undefined operand, an UndefinedError).
		switch a := l.(type) {
		case string:
			if b, ok := r.(string); ok {
				if err := checkLen(int64(len(a)) + int64(len(b))); err != nil {
					return nil, err
				}
				return a + b, nil
			}
			return nil, errorf("can only concatenate str (not %q) to str", typeName(r))
		case *List:
			if b, ok := r.(*List); ok {
				if err := checkItems(int64(len(a.Items)) + int64(len(b.Items))); err != nil {
					return nil, err
				}
				out := append(append([]any{}, a.Items...), b.Items...)
				return &List{Items: out}, nil
			}
		}
		if _, ok := r.(string); ok {
			return nil, errorf("unsupported operand types for +: %s and str", typeName(l))
		}
	case "*":
		// The size is checked before anything is allocated: a string or
		// list repeated past the limits is an error, not an allocation
		// the runtime cannot satisfy.
		if s, ok := l.(string); ok {
			if n, ok := r.(int64); ok {
				size := repeatSize(len(s), n, maxValue)
				if err := checkLen(size); err != nil {
					return nil, err
				}
				if size == 0 {
					return "", nil
				}
				return strings.Repeat(s, int(n)), nil
			}
		}
		if lst, ok := l.(*List); ok {
			if n, ok := r.(int64); ok {
				size := repeatSize(len(lst.Items), n, maxItems)
				if err := checkItems(size); err != nil {
					return nil, err
				}
				out := make([]any, 0, size)
				for range size / max(int64(len(lst.Items)), 1) {
					out = append(out, lst.Items...)
				}
				return &List{Items: out}, nil
			}
		}
	}
	return arith(op, l, r)
}

func arith(op string, l, r any) (any, error) {
	li, lInt := l.(int64)
	ri, rInt := r.(int64)
	if b, ok := l.(bool); ok {
		li, lInt = boolInt(b), true
	}
	if b, ok := r.(bool); ok {
		ri, rInt = boolInt(b), true
	}
	if lInt && rInt {
		switch op {
		case "+":
			return li + ri, nil
		case "-":
			return li - ri, nil
		case "*":
			return li * ri, nil
		case "/":
			if ri == 0 {
				return nil, errorf("division by zero")
			}
			return float64(li) / float64(ri), nil
		case "//":
			if ri == 0 {
				return nil, errorf("integer division by zero")
			}
			q := li / ri
			if (li%ri != 0) && ((li < 0) != (ri < 0)) {
				q--
			}
			return q, nil
		case "%":
			if ri == 0 {
				return nil, errorf("modulo by zero")
			}
			m := li % ri
			if m != 0 && (m < 0) != (ri < 0) {
				m += ri
			}
			return m, nil
		case "**":
			if ri >= 0 {
				// By squaring: the same wrapped product as ri
				// multiplications, in log2(ri) steps.
				out, base := int64(1), li
				for e := ri; e > 0; e >>= 1 {
					if e&1 == 1 {
						out *= base
					}
					base *= base
				}
				return out, nil
			}
			return math.Pow(float64(li), float64(ri)), nil
		}
	}
	lf, ok1 := number(l)
	rf, ok2 := number(r)
	if !ok1 || !ok2 {
		return nil, errorf("unsupported operand types for %s: %s and %s", op, typeName(l), typeName(r))
	}
	switch op {
	case "+":
		return lf + rf, nil
	case "-":
		return lf - rf, nil
	case "*":
		return lf * rf, nil
	case "/":
		if rf == 0 {
			return nil, errorf("division by zero")
		}
		return lf / rf, nil
	case "//":
		if rf == 0 {
			return nil, errorf("division by zero")
		}
		return math.Floor(lf / rf), nil
	case "%":
		if rf == 0 {
			return nil, errorf("modulo by zero")
		}
		return lf - rf*math.Floor(lf/rf), nil
	case "**":
		return math.Pow(lf, rf), nil
	}
	return nil, errorf("unknown operator %s", op)
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func compare(l, r any) (int, error) {
	if a, ok := number(l); ok {
		if b, ok := number(r); ok {
			switch {
			case a < b:
				return -1, nil
			case a > b:
				return 1, nil
			}
			return 0, nil
		}
	}
	if a, ok := l.(string); ok {
		if b, ok := r.(string); ok {
			return strings.Compare(a, b), nil
		}
	}
	return 0, errorf("cannot compare %s with %s", typeName(l), typeName(r))
}

// contains is `needle in haystack`.
func contains(r *renderer, haystack, needle any) (bool, error) {
	switch h := haystack.(type) {
	case string:
		n, ok := needle.(string)
		if !ok {
			return false, errorf("'in <string>' requires a string as left operand, not %s", typeName(needle))
		}
		return strings.Contains(h, n), nil
	case *List:
		for _, x := range h.Items {
			if r.equal(x, needle) {
				return true, nil
			}
		}
		return false, nil
	case *Dict:
		k, ok := needle.(string)
		return ok && hasKey(h, k), nil
	case nil, Undefined:
		return false, errorf("argument of type %s is not iterable", typeName(haystack))
	}
	return false, errorf("argument of type %s is not iterable", typeName(haystack))
}

// loopInfo is a for loop's `loop` variable.
type loopInfo struct {
	i     int
	items []any
}

func (l *loopInfo) attr(name string) any {
	n := len(l.items)
	switch name {
	case "index":
		return int64(l.i + 1)
	case "index0":
		return int64(l.i)
	case "revindex":
		return int64(n - l.i)
	case "revindex0":
		return int64(n - l.i - 1)
	case "first":
		return l.i == 0
	case "last":
		return l.i == n-1
	case "length":
		return int64(n)
	case "depth":
		return int64(1)
	case "depth0":
		return int64(0)
	case "previtem":
		if l.i > 0 {
			return l.items[l.i-1]
		}
	case "nextitem":
		if l.i+1 < n {
			return l.items[l.i+1]
		}
	case "cycle":
		i := l.i
		return Func(func(args []any, _ *Dict) (any, error) {
			if len(args) == 0 {
				return Undefined{}, nil
			}
			return args[i%len(args)], nil
		})
	}
	return Undefined{}
}
