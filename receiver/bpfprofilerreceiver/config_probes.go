package bpfprofilerreceiver

import (
	"errors"
	"fmt"
	"strings"

	"github.com/bpfprofiler/bpfprofiler/internal/probes"
)

// probeErrors names the configuration key of each problem probes.ValidateSpecs
// found ("probes[2]::exit_symbol: ...").
func (c *Config) probeErrors(err error) []error {
	if err == nil {
		return nil
	}
	var out []error
	for _, e := range unjoin(err) {
		var fe *probes.FieldError
		switch {
		case !errors.As(e, &fe):
			out = append(out, fmt.Errorf("probes: %w", e))
		case errors.Is(fe.Err, probes.ErrNoScope):
			out = append(out, fmt.Errorf("probes[%d]: set one of %s", fe.Index, scopeFormsHint))
		case errors.Is(fe.Err, probes.ErrMixedScope):
			continue // Validate names the keys set (scopeForms)
		case fe.Field == "":
			out = append(out, fmt.Errorf("probes[%d]: %w", fe.Index, fe.Err))
		default:
			out = append(out, fmt.Errorf("probes[%d]::%s: %w", fe.Index, c.probeKey(fe.Index, fe.Field), fe.Err))
		}
	}
	return out
}

// probeKey is the YAML key of a probes.Spec field of probe i.
func (c *Config) probeKey(i int, field string) string {
	switch field {
	case "ID":
		return "id"
	case "FileMatch":
		return "file_match"
	case "EntrySymbol":
		if i < len(c.Probes) && c.Probes[i].Symbol != "" {
			return "symbol"
		}
		return "entry_symbol"
	case "ExitSymbol":
		return "exit_symbol"
	case "EntryUSDT":
		return "usdt_entry"
	case "ExitUSDT":
		return "usdt_exit"
	case "MinDuration":
		return "min_duration"
	case "MaxPerSecond":
		return "max_per_second"
	case "Attributes":
		return "attributes"
	}
	if name, ok := strings.CutPrefix(field, "Attributes::"); ok {
		return "attributes::" + name
	}
	return field
}

// scopeFormsHint lists the ways a probe delimits its scopes.
const scopeFormsHint = "symbol, entry_symbol+exit_symbol or usdt_entry+usdt_exit"

// scopeForms returns the ways of delimiting a scope p's keys set, each
// as its keys.
func (p ProbeConfig) scopeForms() []string {
	var forms []string
	if p.Symbol != "" {
		forms = append(forms, "symbol")
	}
	if p.EntrySymbol != "" || p.ExitSymbol != "" {
		forms = append(forms, "entry_symbol+exit_symbol")
	}
	if p.USDTEntry != "" || p.USDTExit != "" {
		forms = append(forms, "usdt_entry+usdt_exit")
	}
	return forms
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
