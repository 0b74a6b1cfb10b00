package main

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Text in the tables a command prints comes from providers and clients (a webhook's event id, a
// message, a provider's error), so it is printed through cell: a control character would reach the
// operator's terminal as a command (ESC starts a sequence that can retitle or clear it, or hide
// what follows; BEL rings; a C1 CSI does what ESC [ does), and a tab or a newline would break the
// table. --json output is left as it is: a JSON reader escapes what it prints.

// cell returns s with every C0 control character (tab and newline among them), DEL, C1 control
// character (U+0080–U+009F) and byte that is not UTF-8 written as a visible escape: \t, \n,
// \r, \x1b, \u009b, \xff.
func cell(s string) string {
	if strings.IndexFunc(s, unsafeRune) < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r <= 0x9f:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// unsafeRune reports whether cell escapes r (utf8.RuneError stands for a byte that is not UTF-8,
// as strings.IndexFunc decodes it; a real U+FFFD is left alone by cell).
func unsafeRune(r rune) bool {
	return r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == utf8.RuneError
}

// terminalLines is s through cell line by line: an error message keeps its lines, and text in it
// from a provider, a client or a server's answer cannot act on the terminal. A tab, which
// multi-line errors indent with (a Postgres driver's connection attempts), is a space: it reads
// as the indent it is, where cell would write it as \t. Every other control character is
// escaped.
func terminalLines(s string) string {
	lines := strings.Split(strings.ReplaceAll(s, "\t", " "), "\n")
	for i, l := range lines {
		lines[i] = cell(l)
	}
	return strings.Join(lines, "\n")
}

// cellOrDash is cell(s), or "-" for an empty s.
func cellOrDash(s string) string {
	if s == "" {
		return "-"
	}
	return cell(s)
}

// cellShort is s on one line (runs of white space, newline and tab among them, made one space:
// a preview reads better so than with \n escapes), through cell, cut to n runes.
func cellShort(s string, n int) string {
	s = cell(strings.Join(strings.Fields(s), " "))
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
