// Package logcapture is a slog handler for tests that keeps every record's level, message and
// attributes, to count what a component logged.
package logcapture

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
)

// Lines keeps each record as "LEVEL message k=v …" (the attributes of the logger first, then the
// record's). It is safe for concurrent use; a handler made by WithAttrs keeps its records in the
// Lines it was made from.
type Lines struct {
	mu    sync.Mutex
	lines []string

	root  *Lines // the Lines keeping the records, nil for the one a test made
	attrs string // " k=v" of WithAttrs
}

// Enabled takes every level.
func (l *Lines) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps r's level, message and attributes.
func (l *Lines) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message + l.attrs)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	k := l.keeper()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lines = append(k.lines, b.String())
	return nil
}

// WithAttrs returns a handler whose records carry attrs too.
func (l *Lines) WithAttrs(attrs []slog.Attr) slog.Handler {
	s := l.attrs
	for _, a := range attrs {
		s += fmt.Sprintf(" %s=%v", a.Key, a.Value)
	}
	return &Lines{root: l.keeper(), attrs: s}
}

// WithGroup drops the group.
func (l *Lines) WithGroup(string) slog.Handler { return l }

func (l *Lines) keeper() *Lines {
	if l.root != nil {
		return l.root
	}
	return l
}

// Count returns how many records begin with prefix ("ERROR delivery: claim").
func (l *Lines) Count(prefix string) int {
	k := l.keeper()
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, s := range k.lines {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

// All returns the records so far.
func (l *Lines) All() []string {
	k := l.keeper()
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.lines)
}
