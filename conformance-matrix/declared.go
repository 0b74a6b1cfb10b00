package matrix

import (
	"fmt"
	"sort"
	"sync"
)

// declared holds the rows of sources kept outside this module (Declare).
var declared struct {
	mu   sync.RWMutex
	rows map[string]Row
}

// Declare adds the row of a source kept outside this module, which the embedded matrix.yaml
// cannot hold, for Find to find. A row that is not valid, names a source the embedded matrix
// declares, or was declared before is refused.
func Declare(row Row) error {
	if err := row.Validate(); err != nil {
		return fmt.Errorf("declare source %q: %w", row.Source, err)
	}
	m, err := Default()
	if err != nil {
		return err
	}
	if _, ok := m.Row(row.Source); ok {
		return fmt.Errorf("declare source %q: the embedded matrix declares it", row.Source)
	}
	declared.mu.Lock()
	defer declared.mu.Unlock()
	if _, dup := declared.rows[row.Source]; dup {
		return fmt.Errorf("declare source %q: declared twice", row.Source)
	}
	if declared.rows == nil {
		declared.rows = map[string]Row{}
	}
	declared.rows[row.Source] = row
	return nil
}

// Find returns the row of the named source: the embedded matrix's, or one Declare added. It is
// what everything that reads a source's declaration asks.
func Find(source string) (Row, bool, error) {
	m, err := Default()
	if err != nil {
		return Row{}, false, err
	}
	if r, ok := m.Row(source); ok {
		return r, true, nil
	}
	declared.mu.RLock()
	defer declared.mu.RUnlock()
	r, ok := declared.rows[source]
	return r, ok, nil
}

// Declared returns the rows Declare added, sorted by source.
func Declared() []Row {
	declared.mu.RLock()
	defer declared.mu.RUnlock()
	out := make([]Row, 0, len(declared.rows))
	for _, r := range declared.rows {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Source < out[j].Source })
	return out
}
