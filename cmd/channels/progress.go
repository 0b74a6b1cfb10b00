package main

import (
	"fmt"
	"os"
)

// progressf writes a progress line to stderr, but only when stderr is a terminal: scripts and
// logs reading the output never see it.
func (a *app) progressf(format string, args ...any) {
	f, ok := a.stderr.(*os.File)
	if !ok {
		return
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return
	}
	fmt.Fprintf(f, format, args...)
}
