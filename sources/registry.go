package sources

import (
	"fmt"
	"sort"
	"sync"

	matrix "github.com/channels-dev/channels/conformance-matrix"
)

// Factory builds a configured source instance.
type Factory func(cfg Config) (Source, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]Factory{}
)

// Register makes a source available under name. It panics if name is registered twice or f is
// nil, like database/sql.Register; sources call it from init.
func Register(name string, f Factory) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if f == nil {
		panic("sources: Register factory is nil for " + name)
	}
	if name == "" {
		panic("sources: Register with an empty name")
	}
	if _, dup := registry[name]; dup {
		panic("sources: Register called twice for " + name)
	}
	registry[name] = f
}

// Declare gives a source kept outside this module its declaration (matrix.Declare): the matrix
// row the embedded conformance-matrix/matrix.yaml holds for the sources built here (parse it
// with matrix.Parse, or build it). Call it, like Register, from the source's init; Declaration,
// New, sinks, reply anchors and the executors' question policy then read the row as they read
// the embedded ones. A row that is not valid, names a source the embedded matrix declares, or
// was declared before is refused.
func Declare(row matrix.Row) error { return matrix.Declare(row) }

// Names lists the registered sources, sorted.
func Names() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// New builds an instance of the registered source name from cfg and validates it (Validator).
// The source must have a row in the conformance matrix.
func New(name string, cfg Config) (Source, error) {
	registryMu.RLock()
	f, ok := registry[name]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("source %q is not registered (registered: %v)", name, Names())
	}
	if _, err := Declaration(name); err != nil {
		return nil, err
	}
	src, err := f(cfg)
	if err != nil {
		return nil, fmt.Errorf("configure source %s %q: %w", name, cfg.Instance, err)
	}
	if v, ok := src.(Validator); ok {
		if err := v.Validate(); err != nil {
			return nil, fmt.Errorf("configure source %s %q: %w", name, cfg.Instance, err)
		}
	}
	return src, nil
}

// Declaration returns the matrix row of the named source: the only place a source's declaration
// lives (the embedded matrix, or Declare for a source kept outside this module).
func Declaration(name string) (matrix.Row, error) {
	r, ok, err := matrix.Find(name)
	switch {
	case err != nil:
		return matrix.Row{}, err
	case !ok:
		return matrix.Row{}, fmt.Errorf("source %q has no row in conformance-matrix/matrix.yaml and was not declared (sources.Declare)", name)
	}
	return r, nil
}
