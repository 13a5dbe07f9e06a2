package probes

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds on a USDT probe's attributes, as bpf/usdtargs.h fetches them.
const (
	// MaxAttributes is the most arguments one probe's records carry.
	MaxAttributes = 4
	// MaxAttributeString is the most bytes of a string argument kept,
	// its NUL included: longer strings are cut to MaxAttributeString-1
	// bytes.
	MaxAttributeString = 128
	// maxArgIndex is the highest argument a probe has (sys/sdt.h: 12).
	maxArgIndex = 11
)

// Attribute is one argument of a USDT probe's entry probe that its
// records carry, as the attribute Name: the integer, or the string at
// that address (String).
type Attribute struct {
	Name   string
	Arg    int
	String bool
}

var attributeValue = regexp.MustCompile(`^(?:arg(\d+)|str\(arg(\d+)\))$`)

// ParseAttribute reads the value of one attribute, "argN" (the integer
// argument N, 0 to 11) or "str(argN)" (the NUL-terminated string argument
// N points at).
func ParseAttribute(name, value string) (Attribute, error) {
	m := attributeValue.FindStringSubmatch(strings.TrimSpace(value))
	if m == nil {
		return Attribute{}, fmt.Errorf("want argN or str(argN) (N 0 to %d), got %q", maxArgIndex, value)
	}
	a := Attribute{Name: name, String: m[2] != ""}
	n, err := strconv.Atoi(m[1] + m[2])
	if err != nil || n > maxArgIndex || (len(m[1]+m[2]) > 1 && (m[1] + m[2])[0] == '0') {
		return Attribute{}, fmt.Errorf("argument %s: want 0 to %d", m[1]+m[2], maxArgIndex)
	}
	a.Arg = n
	return a, nil
}

// reservedAttributes are the prefixes of the attributes every record
// carries, which an argument may not take.
var reservedAttributes = []string{"probe.", "thread."}

// validAttributeName checks an attribute name: non-empty UTF-8 without
// spaces or control characters, not one of the record's own.
func validAttributeName(name string) error {
	switch {
	case name == "":
		return errors.New("an attribute name must not be empty")
	case !utf8.ValidString(name) || strings.ContainsFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return fmt.Errorf("attribute name %q: no spaces or control characters", name)
	}
	for _, p := range reservedAttributes {
		if strings.HasPrefix(name, p) {
			return fmt.Errorf("attribute name %q: %s* are the record's own", name, p)
		}
	}
	return nil
}

// ArgAttributes returns the attributes of a valid Spec in the order of
// the slots of its records' arguments (capture.RawScope.Args).
func (s Spec) ArgAttributes() []Attribute {
	a, _ := s.attributes(0)
	return a
}

// attributes returns the Spec's attributes in the order of their names
// (the order of their slots in a record), or the problems of each as
// FieldErrors of field "Attributes::<name>" ("Attributes" for the set).
func (s Spec) attributes(i int) ([]Attribute, []error) {
	if len(s.Attributes) == 0 {
		return nil, nil
	}
	var errs []error
	if !s.usdt() {
		return nil, []error{&FieldError{Index: i, Field: "Attributes", Err: errors.New("only USDT probes (usdt_entry, usdt_exit) have arguments")}}
	}
	if len(s.Attributes) > MaxAttributes {
		errs = append(errs, &FieldError{Index: i, Field: "Attributes", Err: fmt.Errorf("at most %d, got %d", MaxAttributes, len(s.Attributes))})
	}
	var out []Attribute
	for _, name := range slices.Sorted(maps.Keys(s.Attributes)) {
		field := "Attributes::" + name
		if err := validAttributeName(name); err != nil {
			errs = append(errs, &FieldError{Index: i, Field: field, Err: err})
			continue
		}
		a, err := ParseAttribute(name, s.Attributes[name])
		if err != nil {
			errs = append(errs, &FieldError{Index: i, Field: field, Err: err})
			continue
		}
		out = append(out, a)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}
