package ciliumspec

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// A check judges one JSON-shaped value (maps, slices, strings, float64
// numbers, booleans, nil). Its error says what is wrong with the value; the
// containers around it add where the value is (see fieldError), so a valid
// spec costs no path building.
type check func(v any) error

// fieldError is a refusal at a path in the spec. The path is built on the
// way back up, innermost segment first.
type fieldError struct {
	segments []string // ".field" or "[i]", innermost first
	msg      string
}

func (e *fieldError) Error() string {
	var path strings.Builder
	for i := len(e.segments) - 1; i >= 0; i-- {
		path.WriteString(e.segments[i])
	}
	if path.Len() == 0 {
		return e.msg
	}
	return strings.TrimPrefix(path.String(), ".") + ": " + e.msg
}

// at puts err (from a check of the value at segment) under segment.
func at(segment string, err error) error {
	if err == nil {
		return nil
	}
	fe, ok := err.(*fieldError)
	if !ok {
		fe = &fieldError{msg: err.Error()}
	}
	fe.segments = append(fe.segments, segment)
	return fe
}

// field is the path segment of a field name.
func field(name string) string { return "." + name }

// index is the path segment of a list item.
func index(i int) string { return fmt.Sprintf("[%d]", i) }

// plainKey is a map key that reads unambiguously after a dot in a path.
var plainKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// key is the path segment of a key of a user's map (matchLabels, AWS
// labels): quoted when it is not a plain word, and clipped, so that a path
// stays readable and short whatever the key.
func key(k string) string {
	if plainKey.MatchString(k) && len(k) <= 64 {
		return "." + k
	}
	return "[" + quote(k) + "]"
}

// quote quotes a value for a message, at most 64 bytes of it.
func quote(s string) string {
	const limit = 64
	if len(s) <= limit {
		return fmt.Sprintf("%q", s)
	}
	n := limit
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:n], len(s))
}

func mustBe(want string, got any) error {
	return fmt.Errorf("must be %s, got %s", want, jsonType(got))
}

// jsonType names the JSON type of v, a JSON-shaped value.
func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	case float64, float32, int, int64, int32:
		return "a number"
	}
	return fmt.Sprintf("a Go %T", v)
}

// fields declares an object's fields, each with the check of its value.
type fields map[string]check

// object checks an object (what names it in messages) that holds only the
// declared fields, each passing its check, and then passes each of rules,
// which see the whole object (Cilium's checks across fields).
func object(what string, declared fields, rules ...func(m map[string]any) error) check {
	names := slices.Sorted(maps.Keys(declared))
	return func(v any) error {
		m, ok := v.(map[string]any)
		if !ok {
			return mustBe(article(what)+" (an object)", v)
		}
		known := 0
		for _, k := range names {
			if _, ok := m[k]; ok {
				known++
			}
		}
		if known < len(m) {
			for _, k := range slices.Sorted(maps.Keys(m)) {
				if declared[k] == nil {
					return fmt.Errorf("%s is not a field of %s (%s)", quote(k), article(what), strings.Join(names, ", "))
				}
			}
		}
		for _, k := range names {
			if fv, ok := m[k]; ok {
				if err := declared[k](fv); err != nil {
					return at(field(k), err)
				}
			}
		}
		for _, rule := range rules {
			if err := rule(m); err != nil {
				return err
			}
		}
		return nil
	}
}

// article puts "a" or "an" before what, by its sound: "an ICMP rule", "an
// L7 rule set" (an acronym's letters are spelled out).
func article(what string) string {
	vowels := "aeiouAEIOU"
	if len(what) > 1 && ('A' <= what[1] && what[1] <= 'Z' || '0' <= what[1] && what[1] <= '9') {
		vowels = "AEFHILMNORSX"
	}
	if strings.ContainsRune(vowels, rune(what[0])) {
		return "an " + what
	}
	return "a " + what
}

// list checks a list of at most max items (0: any number), each an item
// (what names it in messages) passing its check.
func list(what string, max int, item check) check {
	return func(v any) error {
		l, ok := v.([]any)
		if !ok {
			return mustBe("a list of "+plural(what), v)
		}
		if max > 0 && len(l) > max {
			return fmt.Errorf("has %d %s, at most %d allowed", len(l), plural(what), max)
		}
		for i, e := range l {
			if err := item(e); err != nil {
				return at(index(i), err)
			}
		}
		return nil
	}
}

// plural is what's plural: "rules", "entities".
func plural(what string) string {
	if strings.HasSuffix(what, "y") && !strings.HasSuffix(what, "ey") {
		return what[:len(what)-1] + "ies"
	}
	return what + "s"
}

// nonEmpty is a list check that also refuses an empty list.
func nonEmpty(what string, c check) check {
	return func(v any) error {
		if l, ok := v.([]any); ok && len(l) == 0 {
			return fmt.Errorf("must hold at least one %s, or be left out", what)
		}
		return c(v)
	}
}

// unique is a list-of-strings check that also refuses a string listed twice
// (the CRD's list-type "set").
func unique(c check) check {
	return func(v any) error {
		if err := c(v); err != nil {
			return err
		}
		seen := map[string]bool{}
		for i, e := range v.([]any) {
			s := e.(string)
			if seen[s] {
				return at(index(i), fmt.Errorf("%s is listed twice", quote(s)))
			}
			seen[s] = true
		}
		return nil
	}
}

// anyString is any string.
func anyString(v any) error {
	if _, ok := v.(string); !ok {
		return mustBe("a string", v)
	}
	return nil
}

// str checks a string with valid, which returns why a string is not valid.
func str(valid func(s string) error) check {
	return func(v any) error {
		s, ok := v.(string)
		if !ok {
			return mustBe("a string", v)
		}
		return valid(s)
	}
}

// required checks that the object has each of names.
func required(what string, names ...string) func(m map[string]any) error {
	return func(m map[string]any) error {
		for _, n := range names {
			if _, ok := m[n]; !ok {
				return fmt.Errorf("%s needs %s", what, n)
			}
		}
		return nil
	}
}

// exactlyOne checks that the object has exactly one of names (the CRD's
// oneOf of required fields).
func exactlyOne(what string, names ...string) func(m map[string]any) error {
	return func(m map[string]any) error {
		var have []string
		for _, n := range names {
			if _, ok := m[n]; ok {
				have = append(have, n)
			}
		}
		switch len(have) {
		case 1:
			return nil
		case 0:
			return fmt.Errorf("%s needs one of %s", what, strings.Join(names, ", "))
		}
		return fmt.Errorf("%s takes only one of %s, got %s", what, strings.Join(names, ", "), strings.Join(have, " and "))
	}
}

// enum checks a string that is one of values, exactly (the CRD's enums are
// case-sensitive).
func enum(values ...string) check {
	return str(func(s string) error {
		if !slices.Contains(values, s) {
			return fmt.Errorf("%s is not one of %s", quote(s), strings.Join(values, ", "))
		}
		return nil
	})
}

func boolean(v any) error {
	if _, ok := v.(bool); !ok {
		return mustBe("a boolean", v)
	}
	return nil
}

// integer is v as an integer, if it is a whole JSON number.
func integer(v any) (int64, bool) {
	switch n := v.(type) {
	case float64:
		if n != math.Trunc(n) || math.Abs(n) > 1<<53 {
			return 0, false
		}
		return int64(n), true
	case int:
		return int64(n), true
	case int64:
		return n, true
	case int32:
		return int64(n), true
	}
	return 0, false
}

// intRange checks a whole number in min..max.
func intRange(min, max int64) check {
	return func(v any) error {
		n, ok := integer(v)
		if !ok {
			if f, isNumber := v.(float64); isNumber {
				return fmt.Errorf("%v is not a whole number", f)
			}
			return mustBe(fmt.Sprintf("a whole number %d..%d", min, max), v)
		}
		if n < min || n > max {
			return fmt.Errorf("%d is out of range %d..%d", n, min, max)
		}
		return nil
	}
}

// stringMap checks an object of strings (the keys are the user's), each
// key passing keyOK and each value passing value.
func stringMap(keyOK func(k string) error, value check) check {
	entry := func(k string, v any) error {
		if err := value(v); err != nil {
			return err
		}
		return keyOK(k)
	}
	return func(v any) error {
		m, ok := v.(map[string]any)
		if !ok {
			return mustBe("an object of strings", v)
		}
		// Sorting costs more than the checks of a big map (tens of
		// thousands of labels); only a refusal needs the order, to name
		// the same entry every time.
		for k, v := range m {
			if entry(k, v) != nil {
				for _, k := range slices.Sorted(maps.Keys(m)) {
					if err := entry(k, m[k]); err != nil {
						return at(key(k), err)
					}
				}
			}
		}
		return nil
	}
}

// anyKey takes any key.
func anyKey(string) error { return nil }

// count is the number of items of the list at m[name] (0 when absent).
func count(m map[string]any, name string) int {
	l, _ := m[name].([]any)
	return len(l)
}
