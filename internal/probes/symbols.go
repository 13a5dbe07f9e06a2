package probes

import (
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// symbolQuery matches raw ELF symbol names against a symbol as written in a
// Spec.
type symbolQuery struct {
	raw      string
	mangled  bool   // raw is a mangled C++/Rust name: exact match only
	anyArgs  bool   // no parameter list, or "(...)": every overload matches
	squashed string // demangled form without spaces (and without "(...)")
	hint     string // an identifier every matching mangled name contains
}

func newSymbolQuery(s string) symbolQuery {
	q := symbolQuery{raw: s}
	if strings.HasPrefix(s, "_Z") || strings.HasPrefix(s, "_R") {
		q.mangled = true
		return q
	}
	body := strings.TrimSpace(s)
	if trimmed, ok := strings.CutSuffix(body, "(...)"); ok {
		body = trimmed
	}
	q.anyArgs = !strings.Contains(body, "(")
	q.squashed = squash(body)
	name, _, _ := strings.Cut(body, "(")
	q.hint = longestIdentifier(name)
	return q
}

// MatchSymbol reports whether the raw ELF symbol name matches symbol as
// written in a Spec:
//   - the same raw name (mangled C++ names, C and Go names);
//   - the demangled name with its parameter list, spaces ignored:
//     "node::InternalCallbackScope::~InternalCallbackScope()";
//   - a demangled name without a parameter list (or with "(...)") matches
//     every overload: "node::InternalCallbackScope::InternalCallbackScope".
//
// C++ constructors and destructors have several mangled variants (C1/C2,
// D0/D1/D2) with one demangled name; all of them match.
func MatchSymbol(symbol, name string) bool { return newSymbolQuery(symbol).match(name) }

func (q symbolQuery) match(name string) bool {
	if name == q.raw {
		return true
	}
	if q.mangled || q.squashed == "" || !strings.Contains(name, q.hint) {
		return false
	}
	if !strings.HasPrefix(name, "_Z") && !strings.HasPrefix(name, "_R") {
		return false
	}
	opts := []demangle.Option{demangle.NoClones}
	if q.anyArgs {
		opts = append(opts, demangle.NoParams)
	}
	d, err := demangle.ToString(name, opts...)
	if err != nil {
		return false
	}
	// Clones (foo.cold, foo.constprop.0) are not the function's entry.
	if strings.Contains(name, ".") {
		return false
	}
	return squash(d) == q.squashed
}

func squash(s string) string { return strings.Join(strings.Fields(s), "") }

// longestIdentifier returns the longest C identifier in s: mangled names
// spell source identifiers verbatim, so it is a cheap filter before
// demangling.
func longestIdentifier(s string) string {
	best, cur := "", 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && isIdentChar(s[i]) {
			continue
		}
		if tok := s[cur:i]; len(tok) > len(best) && !notSpelled[tok] {
			best = tok
		}
		cur = i + 1
	}
	return best
}

// notSpelled are words of demangled names that mangled names encode otherwise.
var notSpelled = map[string]bool{
	"operator": true, "const": true, "volatile": true, "unsigned": true, "signed": true,
	"char": true, "short": true, "int": true, "long": true, "bool": true, "void": true,
	"float": true, "double": true,
}

func isIdentChar(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
