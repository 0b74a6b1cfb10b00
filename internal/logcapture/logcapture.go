// Package logcapture is a slog handler for tests that keeps every record's level and message, to
// count what a component logged.
package logcapture

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
)

// Lines keeps each record as "LEVEL message". It is safe for concurrent use.
type Lines struct {
	mu    sync.Mutex
	lines []string
}

// Enabled takes every level.
func (l *Lines) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps r's level and message.
func (l *Lines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, r.Level.String()+" "+r.Message)
	return nil
}

// WithAttrs drops the attributes: only levels and messages are kept.
func (l *Lines) WithAttrs([]slog.Attr) slog.Handler { return l }

// WithGroup drops the group.
func (l *Lines) WithGroup(string) slog.Handler { return l }

// Count returns how many records begin with prefix ("ERROR delivery: claim").
func (l *Lines) Count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

// All returns the records so far.
func (l *Lines) All() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}
