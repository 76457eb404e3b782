package textclean

import (
	"unicode"
	"unicode/utf8"
)

const (
	esc = 0x1b
	bel = 0x07
)

// Clean returns s without terminal controls (see the package doc), as
// valid UTF-8 of at most limit bytes (no limit when limit < 0). A
// sequence that s cuts short is dropped to its end.
func Clean(s string, limit int) string {
	return string(Append(nil, []byte(s), limit))
}

// Append appends src, cleaned as Clean does, to dst, adding at most limit
// bytes (no limit when limit < 0), and returns the extended slice. It
// never cuts a character in two.
func Append(dst, src []byte, limit int) []byte {
	max := len(dst) + limit
	if limit < 0 {
		max = -1
	}
	put := func(b []byte) bool {
		if max >= 0 && len(dst)+len(b) > max {
			return false
		}
		dst = append(dst, b...)
		return true
	}
	var buf [utf8.UTFMax]byte
	for i := 0; i < len(src); {
		c := src[i]
		if c == esc {
			i = skipEscape(src, i+1)
			continue
		}
		if c < utf8.RuneSelf {
			i++
			if c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f) {
				if !put([]byte{c}) {
					return dst
				}
			}
			continue
		}
		r, size := utf8.DecodeRune(src[i:])
		i += size
		switch {
		case r == utf8.RuneError && size == 1:
			if !put([]byte("\uFFFD")) {
				return dst
			}
		case r >= 0x80 && r <= 0x9f:
			// C1 controls: CSI, OSC, DCS, SOS, PM and APC introduce a
			// sequence as their ESC forms do; the others are dropped.
			switch r {
			case 0x9b:
				i = skipCSI(src, i)
			case 0x9d, 0x90, 0x98, 0x9e, 0x9f:
				i = skipString(src, i)
			}
		case unicode.Is(unicode.Cf, r) || unicode.In(r, unicode.Zl, unicode.Zp):
			// Format characters reorder or hide text; line and paragraph
			// separators break lines that a log's reader does not see.
		default:
			n := utf8.EncodeRune(buf[:], r)
			if !put(buf[:n]) {
				return dst
			}
		}
	}
	return dst
}

// skipEscape returns the index after the escape sequence whose ESC came
// just before i.
func skipEscape(src []byte, i int) int {
	if i >= len(src) {
		return i
	}
	switch src[i] {
	case '[':
		return skipCSI(src, i+1)
	case ']', 'P', 'X', '^', '_':
		return skipString(src, i+1)
	}
	// nF sequences: intermediates (0x20-0x2f), then a final byte
	// (0x30-0x7e); Fp, Fe and Fs ones are ESC and one final byte.
	for i < len(src) && src[i] >= 0x20 && src[i] <= 0x2f {
		i++
	}
	if i < len(src) && src[i] >= 0x30 && src[i] <= 0x7e {
		i++
	}
	return i
}

// skipCSI returns the index after a control sequence whose parameters
// start at i: parameter bytes (0x30-0x3f), intermediates (0x20-0x2f) and
// one final byte (0x40-0x7e). A byte that belongs to none ends it there,
// and is not part of it.
func skipCSI(src []byte, i int) int {
	for i < len(src) && src[i] >= 0x20 && src[i] <= 0x3f {
		i++
	}
	if i < len(src) && src[i] >= 0x40 && src[i] <= 0x7e {
		i++
	}
	return i
}

// skipString returns the index after a control string (OSC, DCS, SOS,
// PM, APC) whose text starts at i: it ends at BEL, at ST (ESC \ or the C1
// ST, U+009C), or where src does. It also ends before a line feed: a
// terminal would swallow the lines after an unterminated one, and a log's
// reader must not lose lines a workload hid so.
func skipString(src []byte, i int) int {
	for i < len(src) {
		switch {
		case src[i] == '\n':
			return i
		case src[i] == bel:
			return i + 1
		case src[i] == esc:
			if i+1 < len(src) && src[i+1] == '\\' {
				return i + 2
			}
			// Another sequence starts: the string ends here, and the
			// sequence is removed on its own.
			return i
		case src[i] == 0xc2 && i+1 < len(src) && src[i+1] == 0x9c:
			return i + 2
		}
		i++
	}
	return i
}
