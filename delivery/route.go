package delivery

import (
	"fmt"
	"slices"
	"time"
)

// Route is how the engine reaches one source.
type Route struct {
	// Sender makes the provider call. Required.
	Sender Sender
	// Reconciler looks up unknown outcomes (Lookup class). If nil and Sender implements
	// Reconciler, that is used; with neither, a Lookup delivery whose outcome is unknown fails
	// closed as ambiguous.
	Reconciler Reconciler
	// Recovery is the source's declared recovery class (conformance-matrix/matrix.yaml,
	// delivery_recovery). Empty means Ambiguous: without a declaration nothing is repeated.
	Recovery Recovery
	// Lane names the rate lane of a delivery ("" for none). If nil and Sender implements Laner,
	// that is used; with neither the source has no lanes. The key is prefixed with the source
	// name, so sources never share a lane.
	Lane func(d Delivery) string
	// LaneInterval is the least time between the starts of two provider calls of one lane. Zero
	// means DefaultLaneInterval(source).
	LaneInterval time.Duration
}

// DefaultLaneIntervals are the provider limits of sources-reference.md: Slack about one message
// per second per channel, GitHub content-creating writes serialized at least one second apart per
// token, and one message per second per mail account (a conservative default; configure yours).
var DefaultLaneIntervals = map[string]time.Duration{
	"slack":  time.Second,
	"github": time.Second,
	"email":  time.Second,
}

// DefaultLaneInterval is the lane interval of a source without its own: DefaultLaneIntervals, else
// one second.
func DefaultLaneInterval(source string) time.Duration {
	if d, ok := DefaultLaneIntervals[source]; ok {
		return d
	}
	return time.Second
}

// resolved completes r for source: the optional capabilities of its Sender, default interval and
// recovery class.
func (r Route) resolved(source string) Route {
	if r.Reconciler == nil {
		if rc, ok := r.Sender.(Reconciler); ok {
			r.Reconciler = rc
		}
	}
	if r.Lane == nil {
		if l, ok := r.Sender.(Laner); ok {
			r.Lane = l.Lane
		}
	}
	if r.LaneInterval <= 0 {
		r.LaneInterval = DefaultLaneInterval(source)
	}
	if r.Recovery == "" {
		r.Recovery = Ambiguous
	}
	return r
}

// laneKey returns the stored lane key of d ("" for none).
func (r Route) laneKey(source string, d Delivery) string {
	if r.Lane == nil {
		return ""
	}
	if k := r.Lane(d); k != "" {
		return source + ":" + k
	}
	return ""
}

// Router finds the route to a source for a principal. It returns an error wrapping ErrNoRoute
// when this process cannot send to the source.
type Router interface {
	Route(principal, source string) (Route, error)
}

// Routes is a Router over a fixed table keyed by source name, the same for every principal.
type Routes map[string]Route

// Route returns the route of source.
func (rs Routes) Route(_, source string) (Route, error) {
	r, ok := rs[source]
	if !ok || r.Sender == nil {
		return Route{}, fmt.Errorf("%w %q", ErrNoRoute, source)
	}
	return r, nil
}

// Sources lists the table's sources, sorted. An engine whose Router has a Sources method claims
// only deliveries of those sources, so processes that host different sources share one store.
func (rs Routes) Sources() []string {
	out := make([]string, 0, len(rs))
	for s := range rs {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}
