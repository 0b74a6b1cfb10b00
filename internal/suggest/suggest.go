// Package suggest finds the word a mistyped one most likely meant: a configuration key, an
// evidence kind.
package suggest

// Nearest returns the candidate closest to word by edit distance, at most maxEdits edits away,
// or "" when none is that close. Of equally close candidates, the first wins.
func Nearest(word string, candidates []string, maxEdits int) string {
	best, bestD := "", maxEdits+1
	for _, c := range candidates {
		if d := distance(word, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
