package ctl

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxQuoted is how much of a string a peer sent (a name, an address, an
// operation) goes into a log line or an error message: a request may carry
// a megabyte in any string field, and a message that quoted it whole would
// let one client write megabytes to the agent's log with every request.
const MaxQuoted = 64

// MaxErrorText bounds the message of an error response (ErrorResponse),
// whatever made it: an honest error names a few values and stays well
// under it.
const MaxErrorText = 512

// Clean returns s fit to go into a log line or an error message: at most
// MaxQuoted bytes of it, escaped as strconv.Quote escapes (control
// characters, invalid UTF-8, and every character that is not printable,
// bidirectional overrides included), without the quotes, and, when s was
// longer, a marker with its length. A string of printable characters
// within MaxQuoted comes back as it is.
func Clean(s string) string {
	q := strconv.Quote(cut(s, MaxQuoted))
	q = q[1 : len(q)-1]
	if len(s) > MaxQuoted {
		q += fmt.Sprintf("...(%d bytes)", len(s))
	}
	return q
}

// cut returns at most the first n bytes of s, not ending in the middle of
// a character: a cut one would print as escaped bytes that were never
// there.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for i := len(s); i > len(s)-utf8.UTFMax && i > 0; i-- {
		if utf8.RuneStart(s[i-1]) {
			if !utf8.FullRuneInString(s[i-1:]) {
				s = s[:i-1]
			}
			break
		}
	}
	return s
}

// Quote is Clean in double quotes: %s of Quote(s) is %q of s for a string
// that needs no escaping and fits MaxQuoted.
func Quote(s string) string { return `"` + Clean(s) + `"` }

// ClipText cuts a message to n bytes (on a character boundary), marking
// the cut with the message's length, and escapes the characters in it
// that are not printable (as strconv.Quote would; quotes and backslashes
// stay as they are, so an honest message reads as written): for a message
// that may quote, somewhere inside, what a peer sent.
func ClipText(s string, n int) string {
	full := len(s)
	s = cut(s, n)
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) >= 0 || !utf8.ValidString(s) {
		var b strings.Builder
		for i, w := 0, 0; i < len(s); i += w {
			r, size := utf8.DecodeRuneInString(s[i:])
			w = size
			switch {
			case r == utf8.RuneError && size == 1:
				fmt.Fprintf(&b, `\x%02x`, s[i])
			case unicode.IsPrint(r) || r == ' ':
				b.WriteRune(r)
			default:
				q := strconv.QuoteRune(r)
				b.WriteString(q[1 : len(q)-1])
			}
		}
		s = b.String()
	}
	if full > n {
		s = fmt.Sprintf("%s...(%d bytes)", s, full)
	}
	return s
}
