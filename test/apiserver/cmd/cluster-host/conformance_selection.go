package main

import (
	"regexp"
	"strings"
)

// excludedSpec is a spec of the run's focus that its skip left out, with the skip's
// alternative that matched, so that docs/conformance.md can say why each one did not run.
type excludedSpec struct {
	Name string `json:"name"`
	Term string `json:"term"` // the first top-level alternative of the skip that matches
}

// selection is a run's focus and skip, compiled as ginkgo compiles them (Go regular
// expressions matched anywhere in the spec's full text).
type selection struct {
	focus *regexp.Regexp
	terms []*regexp.Regexp // the skip's top-level alternatives, in order
}

// newSelection compiles focus and skip; an empty skip skips nothing.
func newSelection(focus, skip string) (*selection, error) {
	f, err := regexp.Compile(focus)
	if err != nil {
		return nil, err
	}
	s := &selection{focus: f}
	for _, t := range skipTerms(skip) {
		re, err := regexp.Compile(t)
		if err != nil {
			return nil, err
		}
		s.terms = append(s.terms, re)
	}
	return s, nil
}

// excludedBy returns the skip's alternative that left out a spec of the focus, or "" when
// the spec is outside the focus or no alternative matches it.
func (s *selection) excludedBy(name string) string {
	if s == nil || !s.focus.MatchString(name) {
		return ""
	}
	for _, t := range s.terms {
		if t.MatchString(name) {
			return t.String()
		}
	}
	return ""
}

// skipTerms splits a regular expression at its top-level "|": not inside parentheses or a
// character class, and not escaped.
func skipTerms(re string) []string {
	if re == "" {
		return nil
	}
	var terms []string
	depth, class, start := 0, false, 0
	for i := 0; i < len(re); i++ {
		switch c := re[i]; {
		case c == '\\':
			i++
		case class:
			class = c != ']'
		case c == '[':
			class = true
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == '|' && depth == 0:
			terms = append(terms, re[start:i])
			start = i + 1
		}
	}
	terms = append(terms, re[start:])
	for i := range terms {
		terms[i] = strings.TrimSpace(terms[i])
	}
	return terms
}
