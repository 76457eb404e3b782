package gatecheck

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Bound is what a metric check's value must be: below or above a
// number, or within a range.
type Bound struct {
	Op   string // "<", "<=", ">", ">=", ".."
	A, B float64
}

// ParseBound reads "< 0.01", "<= 0.01", "> 0.99", ">= 0.99" or
// "0.5..2" (both ends included).
func ParseBound(s string) (Bound, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Bound{}, errors.New(`a metric check needs a bound: "< 0.01", "<= x", "> x", ">= x" or a range "a..b"`)
	}
	for _, op := range []string{"<=", ">=", "<", ">"} {
		if rest, ok := strings.CutPrefix(s, op); ok {
			v, err := number(rest)
			if err != nil {
				return Bound{}, err
			}
			return Bound{Op: op, A: v}, nil
		}
	}
	if a, b, ok := strings.Cut(s, ".."); ok {
		lo, err := number(a)
		if err != nil {
			return Bound{}, err
		}
		hi, err := number(b)
		if err != nil {
			return Bound{}, err
		}
		if lo > hi {
			return Bound{}, fmt.Errorf("range %q is empty: its low end is above its high end", s)
		}
		return Bound{Op: "..", A: lo, B: hi}, nil
	}
	return Bound{}, fmt.Errorf(`%q is not a bound: want "< 0.01", "<= x", "> x", ">= x" or a range "a..b"`, s)
}

func number(s string) (float64, error) {
	s = strings.TrimSpace(s)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a finite number", s)
	}
	return v, nil
}

// Holds reports whether v is within the bound.
func (b Bound) Holds(v float64) bool {
	switch b.Op {
	case "<":
		return v < b.A
	case "<=":
		return v <= b.A
	case ">":
		return v > b.A
	case ">=":
		return v >= b.A
	case "..":
		return v >= b.A && v <= b.B
	}
	return false
}

// String is the bound as people write it.
func (b Bound) String() string {
	if b.Op == ".." {
		return Num(b.A) + ".." + Num(b.B)
	}
	return b.Op + " " + Num(b.A)
}

// Not is what a value outside the bound is, for evidence: "0.12 > 0.01"
// reads "0.12" + b.Not().
func (b Bound) Not() string {
	switch b.Op {
	case "<":
		return " >= " + Num(b.A)
	case "<=":
		return " > " + Num(b.A)
	case ">":
		return " <= " + Num(b.A)
	case ">=":
		return " < " + Num(b.A)
	}
	return " outside " + b.String()
}

// Num formats a value for people: short, exact enough to compare.
func Num(v float64) string {
	return strconv.FormatFloat(v, 'g', 4, 64)
}
