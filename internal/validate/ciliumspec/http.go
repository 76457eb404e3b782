package ciliumspec

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
)

// A policy's HTTP rules are bounded in number (MaxHTTPRules) and in the
// text of their regular expressions, paths and methods, each distinct one
// counted once (MaxHTTPRegexpBytes). Check compiles each to see that
// Cilium can, and compiling costs up to tens of microseconds a byte (a
// Unicode class such as \pL in an alternation): the regular expressions of
// a megabyte of spec would cost seconds of CPU on every call. Real policies
// hold tens of HTTP rules with short paths; Cilium itself sets no bound.
const (
	MaxHTTPRules       = 1000
	MaxHTTPRegexpBytes = 32 << 10
)

// httpRegexp is the path or method of an HTTP rule: ingress[i] or
// egress[i] (deny rules have no L7 rules), .toPorts[port].rules.http[rule].
type httpRegexp struct {
	direction     string
	i, port, rule int
	field, expr   string
}

// at puts err at the field's path in the spec.
func (r httpRegexp) at(err error) error {
	err = at(field(r.field), err)
	for _, segment := range []string{index(r.rule), field("http"), field("rules"), index(r.port), field("toPorts"), index(r.i), field(r.direction)} {
		err = at(segment, err)
	}
	return err
}

// httpRegexps checks the regular expressions of spec's HTTP rules within
// the bounds above, compiling each distinct one once. It runs after the
// schema, which has checked every value's type.
func httpRegexps(spec map[string]any) error {
	var found []httpRegexp
	rules := 0
	for _, direction := range []string{"ingress", "egress"} {
		directionRules, _ := spec[direction].([]any)
		for i, r := range directionRules {
			rule, _ := r.(map[string]any)
			portRules, _ := rule["toPorts"].([]any)
			for port, p := range portRules {
				portRule, _ := p.(map[string]any)
				l7, _ := portRule["rules"].(map[string]any)
				httpRules, _ := l7["http"].([]any)
				rules += len(httpRules)
				for k, h := range httpRules {
					http, _ := h.(map[string]any)
					for _, name := range []string{"method", "path"} {
						if s, ok := http[name].(string); ok {
							found = append(found, httpRegexp{direction, i, port, k, name, s})
						}
					}
				}
			}
		}
	}
	if rules > MaxHTTPRules {
		return fmt.Errorf("has %d HTTP rules, at most %d allowed in a policy (each is a regular expression or two to compile); split the policy", rules, MaxHTTPRules)
	}
	distinct := make(map[string]bool, len(found))
	text := 0
	for _, r := range found {
		if !distinct[r.expr] {
			distinct[r.expr] = true
			text += len(r.expr)
		}
	}
	if text > MaxHTTPRegexpBytes {
		return fmt.Errorf("its HTTP rules' paths and methods hold %d bytes of regular expressions (each distinct one counted once), at most %d allowed in a policy; split the policy", text, MaxHTTPRegexpBytes)
	}
	verdicts := make(map[string]error, len(distinct))
	for _, r := range found {
		err, done := verdicts[r.expr]
		if !done {
			err = regularExpression(r.expr)
			verdicts[r.expr] = err
		}
		if err != nil {
			return r.at(err)
		}
	}
	return nil
}

// regularExpression refuses s if Go's regexp, Cilium's, does not compile
// it. The message quotes s clipped and names what is wrong by its code
// only: the parser's own message repeats the expression, all of it.
func regularExpression(s string) error {
	_, err := regexp.Compile(s)
	if err == nil {
		return nil
	}
	why := "it does not compile"
	var syntaxErr *syntax.Error
	if errors.As(err, &syntaxErr) {
		why = string(syntaxErr.Code)
	}
	return fmt.Errorf("%s is not a regular expression: %s", quote(s), why)
}
