package v8

import "fmt"

// scopeInfo is what the namer reads of a function's ScopeInfo.
type scopeInfo struct {
	name  uint64 // tagged: the function's name (a String), 0: none
	start int32  // start position of the function, -1: unknown
}

// readScopeInfo reads the ScopeInfo at tagged (its type already checked):
// the function variable's name slot and the position info, found by
// walking the variable part the flags describe (see ScopeInfoLayout).
func (h *heap) readScopeInfo(tagged uint64) (scopeInfo, error) {
	s := scopeInfo{start: -1}
	sl := &h.l.Scope
	a := tagged - heapObjectTag
	flags, err := h.u32(a + uint64(sl.FlagsOffset))
	if err != nil {
		return s, err
	}
	locals, err := h.smiField(tagged, 24) // context_local_count
	if err != nil {
		return s, err
	}
	if locals < 0 || locals > scopeInfoMaxSlots {
		return s, fmt.Errorf("scope info at %#x: %d context locals", tagged, locals)
	}
	scope := flags & scopeTypeMask
	slot := a + scopeInfoVariablePart
	if sl.PositionFirst {
		if s.start, err = h.smiAt(slot); err != nil {
			return s, err
		}
		slot += 16
		if scope == sl.ModuleScope {
			slot += 8 // module_variable_count
		}
	}
	if int(locals) < sl.MaxInlinedLocals {
		slot += 8 * uint64(locals) // names
	} else {
		slot += 8 // the names' hash table
	}
	slot += 8 * uint64(locals) // infos
	if flags&scopeSavedClassVarBit != 0 {
		slot += 8
	}
	if (flags>>scopeFunctionVarShift)&3 != 0 {
		name, err := h.u64(slot)
		if err != nil {
			return s, err
		}
		if !isSmi(name) { // Smi 0: no shared name
			s.name = name
		}
		slot += 16
	}
	if flags&scopeInferredNameBit != 0 {
		slot += 8
	}
	if !sl.PositionFirst && hasPositionInfo(sl, scope) {
		if s.start, err = h.smiAt(slot); err != nil {
			return s, err
		}
	}
	return s, nil
}

// hasPositionInfo says whether a ScopeInfo of scope type scope has
// position info (before 13.x: function, script, eval, module and class
// scopes).
func hasPositionInfo(sl *ScopeInfoLayout, scope uint32) bool {
	switch scope {
	case sl.FunctionScope, sl.ScriptScope, sl.EvalScope, sl.ModuleScope, sl.ClassScope:
		return true
	}
	return false
}

// smiAt reads the Smi at addr.
func (h *heap) smiAt(addr uint64) (int32, error) {
	v, err := h.u64(addr)
	if err != nil {
		return 0, err
	}
	s, ok := smiValue(v)
	if !ok {
		return 0, fmt.Errorf("word at %#x: not a Smi: %#x", addr, v)
	}
	return s, nil
}
