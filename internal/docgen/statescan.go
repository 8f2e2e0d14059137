package docgen

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/metrics"
	"github.com/kvrouter/kvrouter/trust"
)

// stateNames is every name the replica hands to metrics.State: counters
// (kvrouter_<name>_total{source}), gauges (kvrouter_<name>) and worker
// gauges (kvrouter_<name>{worker_id, dp_rank}, with their help).
type stateNames struct {
	counters     map[string]bool
	gauges       map[string]bool
	workerGauges map[string]string // name → help
}

// Names built at run time from a prefix, with the suffixes their owners
// produce, so that a new index counter or trust state shows up in the
// docs without a change here. index_<name> are the keys of the actors'
// Status.IndexCounters (the index's counters plus the shards' own), read
// from a router started for the purpose.
var dynamicCounterPrefixes = map[string]func() ([]string, error){
	"index_": func() ([]string, error) {
		cfg := actors.DefaultConfig()
		cfg.Shards = 1
		cfg.Logger = slog.New(slog.DiscardHandler)
		r, err := actors.Start(cfg)
		if err != nil {
			return nil, fmt.Errorf("starting the actors for their index counters: %w", err)
		}
		defer r.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := r.Status(ctx, false)
		if err != nil {
			return nil, fmt.Errorf("reading the actors' index counters: %w", err)
		}
		delete(st.IndexCounters, actors.HeldBlocksStat) // a gauge: replica/state.go names it
		return sortedKeys(st.IndexCounters), nil
	},
	"index_trust_to_": func() ([]string, error) {
		var out []string
		for _, s := range trust.States {
			out = append(out, s.String())
		}
		return out, nil
	},
}

// scanStateNames reads the replica package's source (dir) for the names
// it exports through metrics.State: metrics.Counter and
// metrics.WorkerGauge literals, the keys of map literals ranged over to
// build counters, string-indexed Gauges, and the literal arguments of
// local helpers that build worker gauges. A name it cannot resolve is an
// error, so a new metric cannot slip past the generated docs.
func scanStateNames(dir string) (*stateNames, error) {
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	out := &stateNames{counters: map[string]bool{}, gauges: map[string]bool{}, workerGauges: map[string]string{}}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, p, src, 0)
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", p, err)
		}
		if err := scanFile(fset, f, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func scanFile(fset *token.FileSet, f *ast.File, out *stateNames) error {
	var firstErr error
	fail := func(n ast.Node, format string, args ...any) {
		if firstErr == nil {
			firstErr = fmt.Errorf("%s: %s", fset.Position(n.Pos()), fmt.Sprintf(format, args...))
		}
	}
	// rangeKeys: identifiers bound as the key of a range over a string-keyed
	// map literal → that literal's keys.
	rangeKeys := map[*ast.Object][]string{}
	// helpers: closures whose parameters feed a WorkerGauge's Name and Help
	// → the parameters' positions.
	type helper struct{ name, help int }
	helpers := map[*ast.Object]helper{}

	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.RangeStmt:
			lit, ok := n.X.(*ast.CompositeLit)
			key, ok2 := n.Key.(*ast.Ident)
			if !ok || !ok2 || key.Obj == nil {
				return true
			}
			if mt, ok := lit.Type.(*ast.MapType); ok && isIdent(mt.Key, "string") {
				for _, e := range lit.Elts {
					if kv, ok := e.(*ast.KeyValueExpr); ok {
						if s, ok := stringLit(kv.Key); ok {
							rangeKeys[key.Obj] = append(rangeKeys[key.Obj], s)
						}
					}
				}
			}
		case *ast.AssignStmt:
			// g := func(name, help string, ...) { ... metrics.WorkerGauge{Name: name, Help: help ...} }
			if len(n.Lhs) != 1 || len(n.Rhs) != 1 {
				return true
			}
			id, ok := n.Lhs[0].(*ast.Ident)
			fn, ok2 := n.Rhs[0].(*ast.FuncLit)
			if !ok || !ok2 || id.Obj == nil {
				return true
			}
			params := paramObjects(fn.Type)
			ast.Inspect(fn.Body, func(m ast.Node) bool {
				if cl, ok := m.(*ast.CompositeLit); ok && isSelector(cl.Type, "metrics", "WorkerGauge") {
					h := helper{name: -1, help: -1}
					for _, e := range cl.Elts {
						kv, ok := e.(*ast.KeyValueExpr)
						if !ok {
							continue
						}
						if v, ok := kv.Value.(*ast.Ident); ok {
							for i, p := range params {
								if p == v.Obj && isIdent(kv.Key, "Name") {
									h.name = i
								}
								if p == v.Obj && isIdent(kv.Key, "Help") {
									h.help = i
								}
							}
						}
					}
					if h.name >= 0 {
						helpers[id.Obj] = h
					}
				}
				return true
			})
		case *ast.CallExpr:
			id, ok := n.Fun.(*ast.Ident)
			if !ok || id.Obj == nil {
				return true
			}
			if h, ok := helpers[id.Obj]; ok {
				name, ok := argLit(n, h.name)
				if !ok {
					fail(n, "worker gauge helper %s called with a name that is not a string literal", id.Name)
					return true
				}
				help, _ := argLit(n, h.help)
				out.workerGauges[name] = help
			}
		case *ast.IndexExpr:
			if sel, ok := n.X.(*ast.SelectorExpr); ok && sel.Sel.Name == "Gauges" {
				s, ok := stringLit(n.Index)
				if !ok {
					fail(n, "a Gauges key that is not a string literal")
					return true
				}
				out.gauges[s] = true
			}
		case *ast.CompositeLit:
			switch {
			case isSelector(n.Type, "metrics", "Counter"):
				name := field(n, "Name")
				if name == nil {
					fail(n, "metrics.Counter without a Name")
					return true
				}
				names, err := resolveCounterName(name, rangeKeys)
				if err != nil {
					fail(n, "%v", err)
					return true
				}
				for _, s := range names {
					out.counters[s] = true
				}
			case isSelector(n.Type, "metrics", "WorkerGauge"):
				name := field(n, "Name")
				s, ok := stringLit(name)
				if !ok {
					if id, isID := name.(*ast.Ident); isID && id.Obj != nil && id.Obj.Kind == ast.Var {
						return true // a helper's parameter: its calls are scanned
					}
					fail(n, "metrics.WorkerGauge whose Name is not a string literal")
					return true
				}
				help, _ := stringLit(field(n, "Help"))
				out.workerGauges[s] = help
			}
		}
		return true
	})
	return firstErr
}

func resolveCounterName(e ast.Expr, rangeKeys map[*ast.Object][]string) ([]string, error) {
	if s, ok := stringLit(e); ok {
		return []string{s}, nil
	}
	if id, ok := e.(*ast.Ident); ok && id.Obj != nil {
		if keys, ok := rangeKeys[id.Obj]; ok {
			return keys, nil
		}
	}
	if b, ok := e.(*ast.BinaryExpr); ok && b.Op == token.ADD {
		if prefix, ok := stringLit(b.X); ok {
			if suffixes, ok := dynamicCounterPrefixes[prefix]; ok {
				list, err := suffixes()
				if err != nil {
					return nil, err
				}
				var out []string
				for _, s := range list {
					out = append(out, prefix+s)
				}
				return out, nil
			}
			return nil, fmt.Errorf("counter name prefix %q is not in docgen's dynamicCounterPrefixes", prefix)
		}
	}
	return nil, fmt.Errorf("metrics.Counter whose Name docgen cannot resolve (use a string literal, a ranged map literal's key or a known prefix)")
}

func paramObjects(ft *ast.FuncType) []*ast.Object {
	var out []*ast.Object
	for _, f := range ft.Params.List {
		for _, n := range f.Names {
			out = append(out, n.Obj)
		}
	}
	return out
}

func argLit(c *ast.CallExpr, i int) (string, bool) {
	if i < 0 || i >= len(c.Args) {
		return "", false
	}
	return stringLit(c.Args[i])
}

func field(cl *ast.CompositeLit, name string) ast.Expr {
	for _, e := range cl.Elts {
		if kv, ok := e.(*ast.KeyValueExpr); ok && isIdent(kv.Key, name) {
			return kv.Value
		}
	}
	return nil
}

func stringLit(e ast.Expr) (string, bool) {
	bl, ok := e.(*ast.BasicLit)
	if !ok || bl.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(bl.Value)
	return s, err == nil
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func isSelector(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	return ok && isIdent(sel.X, pkg) && sel.Sel.Name == name
}

// state builds a metrics.State holding one value of every scanned name,
// so the real state collector renders each one as it does in production.
func (s *stateNames) state() *metrics.State {
	st := &metrics.State{Gauges: map[string]float64{}, Workers: []metrics.WorkerState{{}}}
	for _, n := range sortedKeys(s.counters) {
		st.Counters = append(st.Counters, metrics.Counter{Name: n, Source: "x", Value: 1})
	}
	for n := range s.gauges {
		st.Gauges[n] = 1
	}
	for _, n := range sortedKeys(s.workerGauges) {
		st.WorkerGauges = append(st.WorkerGauges, metrics.WorkerGauge{Name: n, Help: s.workerGauges[n]})
	}
	return st
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
