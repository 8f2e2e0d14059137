package discovery

import (
	"cmp"
	"slices"

	"github.com/kvrouter/kvrouter/kv"
)

// Update is one source's full view. With Err set the source could not
// look (DNS server unreachable, API access refused, InferencePool
// missing): its last view stands, so a failing source never drains the
// fleet it found before.
type Update struct {
	Source  string
	Records []Record
	Err     error
	// Warnings are problems with single engines that did not keep them
	// out (a bad annotation: the source's default is used): counted as
	// bad_record and logged at most once a minute.
	Warnings []error
}

// Plan is what one Update changes.
type Plan struct {
	// Register: engines that appeared (or came back, or changed address,
	// shape or endpoints). Registering also ends a drain.
	Register []Record
	// Drain: engines no source sees any more.
	Drain []kv.WorkerID
	// Ready and NotReady: engines whose readiness changed (a registered
	// engine starts ready unless Register says otherwise).
	Ready, NotReady []kv.WorkerID
}

// Empty reports whether the plan changes nothing.
func (p Plan) Empty() bool {
	return len(p.Register) == 0 && len(p.Drain) == 0 && len(p.Ready) == 0 && len(p.NotReady) == 0
}

// Reconciler merges the sources' views. An engine seen by several sources
// counts once (the first source's record, in source-name order). It is
// pure: no clock, no network.
type Reconciler struct {
	views   map[string]map[kv.WorkerID]Record
	current map[kv.WorkerID]Record // the union, as registered
}

// NewReconciler returns a reconciler with no engines.
func NewReconciler() *Reconciler {
	return &Reconciler{views: map[string]map[kv.WorkerID]Record{}, current: map[kv.WorkerID]Record{}}
}

// Apply takes a source's new view and plans the changes. An update with
// Err changes nothing.
func (r *Reconciler) Apply(u Update) Plan {
	if u.Err != nil {
		return Plan{}
	}
	view := make(map[kv.WorkerID]Record, len(u.Records))
	for _, rec := range u.Records {
		if old, dup := view[rec.ID]; dup && old.Key <= rec.Key {
			continue // one engine listed twice: keep one, deterministically
		}
		view[rec.ID] = rec
	}
	r.views[u.Source] = view
	return r.diff()
}

// Remove forgets a source (it stopped) and plans the drains.
func (r *Reconciler) Remove(source string) Plan {
	delete(r.views, source)
	return r.diff()
}

func (r *Reconciler) diff() Plan {
	union := map[kv.WorkerID]Record{}
	sources := make([]string, 0, len(r.views))
	for s := range r.views {
		sources = append(sources, s)
	}
	slices.Sort(sources)
	for _, s := range sources {
		for id, rec := range r.views[s] {
			if _, seen := union[id]; !seen {
				union[id] = rec
			}
		}
	}
	var p Plan
	for id, rec := range union {
		old, known := r.current[id]
		switch {
		case !known || !old.same(rec):
			p.Register = append(p.Register, rec)
		case old.Ready != rec.Ready && rec.Ready:
			p.Ready = append(p.Ready, id)
		case old.Ready != rec.Ready:
			p.NotReady = append(p.NotReady, id)
		}
	}
	for id := range r.current {
		if _, ok := union[id]; !ok {
			p.Drain = append(p.Drain, id)
		}
	}
	r.current = union
	slices.SortFunc(p.Register, func(a, b Record) int { return cmp.Compare(a.ID, b.ID) })
	slices.Sort(p.Drain)
	slices.Sort(p.Ready)
	slices.Sort(p.NotReady)
	return p
}

// Records lists the engines the sources see, sorted by id.
func (r *Reconciler) Records() []Record {
	out := make([]Record, 0, len(r.current))
	for _, rec := range r.current {
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b Record) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Has reports whether an engine is currently seen.
func (r *Reconciler) Has(id kv.WorkerID) bool { _, ok := r.current[id]; return ok }
