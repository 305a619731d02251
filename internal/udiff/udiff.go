package udiff

import (
	"strconv"
	"strings"
)

// A small line diff (Myers' O(ND) greedy algorithm). The work is
// bounded: at most MaxLines lines a side (else no diff: the caller shows
// sizes and digests only) and maxEdits edits searched for (beyond that
// the changed middle is shown as removed and added whole, still a correct
// diff), and the text is cut at MaxBytes.
const (
	MaxLines    = 10_000
	MaxBytes    = 64 << 10
	maxEdits    = 1_000
	diffContext = 3
)

// edit is one line of an edit script: ' ' kept, '-' removed, '+' added.
type edit struct {
	op   byte
	line string
}

// splitLines cuts s after each "\n"; the last line may lack one.
func splitLines(s string) []string {
	var out []string
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// lineEdits is the edit script from a to b.
func lineEdits(a, b []string) []edit {
	p := 0
	for p < len(a) && p < len(b) && a[p] == b[p] {
		p++
	}
	s := 0
	for s < len(a)-p && s < len(b)-p && a[len(a)-1-s] == b[len(b)-1-s] {
		s++
	}
	out := make([]edit, 0, len(a)+len(b))
	for _, l := range a[:p] {
		out = append(out, edit{' ', l})
	}
	out = append(out, myers(a[p:len(a)-s], b[p:len(b)-s])...)
	for _, l := range a[len(a)-s:] {
		out = append(out, edit{' ', l})
	}
	return out
}

// myers is the shortest edit script from a to b, or, when it needs more
// than maxEdits edits, all of a removed and all of b added.
func myers(a, b []string) []edit {
	n, m := len(a), len(b)
	maxD := min(n+m, maxEdits)
	off := maxD + 1
	v := make([]int32, 2*maxD+3)
	// trace[d] is v over k in [-d-1, d+1] as iteration d found it.
	var trace [][]int32
	found := -1
	for d := 0; d <= maxD && found < 0; d++ {
		snap := make([]int32, 2*d+3)
		copy(snap, v[off-d-1:off+d+2])
		trace = append(trace, snap)
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = int(v[off+k+1])
			} else {
				x = int(v[off+k-1]) + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x, y = x+1, y+1
			}
			v[off+k] = int32(x)
			if x >= n && y >= m {
				found = d
				break
			}
		}
	}
	if found < 0 {
		out := make([]edit, 0, n+m)
		for _, l := range a {
			out = append(out, edit{'-', l})
		}
		for _, l := range b {
			out = append(out, edit{'+', l})
		}
		return out
	}
	var rev []edit
	x, y := n, m
	for d := found; d > 0; d-- {
		snap := trace[d]
		at := func(k int) int { return int(snap[k+d+1]) }
		k := x - y
		prevK := k - 1
		if k == -d || (k != d && at(k-1) < at(k+1)) {
			prevK = k + 1
		}
		prevX := at(prevK)
		prevY := prevX - prevK
		for x > prevX && y > prevY {
			x, y = x-1, y-1
			rev = append(rev, edit{' ', a[x]})
		}
		if x == prevX {
			y--
			rev = append(rev, edit{'+', b[y]})
		} else {
			x--
			rev = append(rev, edit{'-', a[x]})
		}
	}
	for x > 0 && y > 0 {
		x, y = x-1, y-1
		rev = append(rev, edit{' ', a[x]})
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}

// Unified renders old → new as a unified diff with three lines of
// context, cut at MaxBytes (truncated). oldName "" is /dev/null (the
// file does not exist yet). tooLarge: more than MaxLines lines a side,
// no diff made (truncated is then true too). Equal texts give the two
// header lines only.
func Unified(oldName, newName, old, new string) (diff string, truncated, tooLarge bool) {
	a, b := splitLines(old), splitLines(new)
	if len(a) > MaxLines || len(b) > MaxLines {
		return "", true, true
	}
	es := lineEdits(a, b)
	// ai[i], bi[i]: lines of a and b before edit i.
	ai, bi := make([]int, len(es)+1), make([]int, len(es)+1)
	for i, e := range es {
		ai[i+1], bi[i+1] = ai[i], bi[i]
		if e.op != '+' {
			ai[i+1]++
		}
		if e.op != '-' {
			bi[i+1]++
		}
	}
	var out strings.Builder
	full := false
	put := func(s string) {
		if full || out.Len()+len(s) > MaxBytes {
			full = true
			return
		}
		out.WriteString(s)
	}
	from := "a/" + oldName
	if oldName == "" {
		from = "/dev/null"
	}
	put("--- " + from + "\n+++ b/" + newName + "\n")
	for i := 0; i < len(es) && !full; {
		if es[i].op == ' ' {
			i++
			continue
		}
		// A hunk: from this change, through every change that follows
		// within 2×context kept lines, plus context either side.
		start := max(0, i-diffContext)
		end := i
		for j := i; j < len(es); j++ {
			if es[j].op != ' ' {
				end = j + 1
			} else if j-end >= 2*diffContext {
				break
			}
		}
		end = min(len(es), end+diffContext)
		put("@@ -" + hunkRange(ai[start], ai[end]-ai[start]) + " +" + hunkRange(bi[start], bi[end]-bi[start]) + " @@\n")
		for _, e := range es[start:end] {
			l := string(e.op) + e.line
			if !strings.HasSuffix(e.line, "\n") {
				l += "\n\\ No newline at end of file\n"
			}
			put(l)
		}
		i = end
	}
	return out.String(), full, false
}

// hunkRange is "start,count" as diff -u writes it: 1-based, the count
// left out when it is 1, and the line before when it is 0.
func hunkRange(before, count int) string {
	switch count {
	case 0:
		return strconv.Itoa(before) + ",0"
	case 1:
		return strconv.Itoa(before + 1)
	}
	return strconv.Itoa(before+1) + "," + strconv.Itoa(count)
}
