package php

// Layout is where a PHP version keeps what the frame walk and the naming
// read: offsets in bytes of the Zend engine's structures, one PHP minor
// version (its ABI is stable across patch releases). docs/php-layouts.md
// says where each number was read; NTS (non-thread-safe) builds, amd64
// and arm64 alike.
type Layout struct {
	// ExecutorGlobalsSize is sizeof(zend_executor_globals): the size of
	// the executor_globals symbol, checked against the file's.
	ExecutorGlobalsSize uint64
	// CurrentExecuteData is zend_executor_globals.current_execute_data.
	CurrentExecuteData uint32

	// zend_execute_data: opline, func, This.u1.type_info (the call info
	// flags, ZEND_CALL_*) and prev_execute_data.
	ExecuteDataOpline, ExecuteDataFunc, ExecuteDataCallInfo, ExecuteDataPrev uint32

	// zend_function: type (u8), common.function_name, common.scope; its
	// op_array: last (u32, the number of ops), opcodes, filename,
	// line_start and line_end (u32). FunctionSize is sizeof(zend_function),
	// what is read of one.
	FunctionType, FunctionName, FunctionScope                                      uint32
	OpArrayLast, OpArrayOpcodes, OpArrayFilename, OpArrayLineStart, OpArrayLineEnd uint32
	FunctionSize                                                                   uint32

	// ClassName is zend_class_entry.name.
	ClassName uint32
	// OpLineno is zend_op.lineno (u32), OpSize sizeof(zend_op).
	OpLineno, OpSize uint32
	// StringLen and StringVal are zend_string.len and .val.
	StringLen, StringVal uint32
}

// Zend constants the walk and the naming test, the same in 8.2 and 8.4
// ([H] in docs/php-layouts.md: the values in the -dev packages' headers).
const (
	internalFunction = 1       // ZEND_INTERNAL_FUNCTION
	userFunction     = 2       // ZEND_USER_FUNCTION
	evalCode         = 4       // ZEND_EVAL_CODE
	callCode         = 1 << 16 // ZEND_CALL_CODE: a file's or an eval's top code
	callTop          = 1 << 17 // ZEND_CALL_TOP: the frame an execute_ex call was entered with
)

// layouts are the layouts by minor version. Every number is offsetof or
// sizeof printed by a C file compiled against the version's Zend headers
// (Debian's php8.2-dev 8.2.36-1~deb12u1, php8.4-dev 8.4.27-1; amd64 with
// gcc, arm64 with aarch64-linux-gnu-gcc run under qemu-aarch64, the same
// numbers) but
// ExecutorGlobalsSize, which is the size of executor_globals in the
// packages' php, php-fpm (and for 8.2 libphp) dynamic symbol tables.
var layouts = map[string]Layout{
	"8.2": {
		ExecutorGlobalsSize: 1800, // dynsym st_size
		CurrentExecuteData:  488,  // offsetof(zend_executor_globals, current_execute_data)
		ExecuteDataOpline:   0,    // offsetof(zend_execute_data, opline)
		ExecuteDataFunc:     24,   // offsetof(zend_execute_data, func)
		ExecuteDataCallInfo: 40,   // offsetof(zend_execute_data, This) + offsetof(zval, u1.type_info)
		ExecuteDataPrev:     48,   // offsetof(zend_execute_data, prev_execute_data)
		FunctionType:        0,    // offsetof(zend_function, type)
		FunctionName:        8,    // offsetof(zend_function, common.function_name)
		FunctionScope:       16,   // offsetof(zend_function, common.scope)
		OpArrayLast:         80,   // offsetof(zend_op_array, last)
		OpArrayOpcodes:      88,   // offsetof(zend_op_array, opcodes)
		OpArrayFilename:     152,  // offsetof(zend_op_array, filename)
		OpArrayLineStart:    160,  // offsetof(zend_op_array, line_start)
		OpArrayLineEnd:      164,  // offsetof(zend_op_array, line_end)
		FunctionSize:        248,  // sizeof(zend_function)
		ClassName:           8,    // offsetof(zend_class_entry, name)
		OpLineno:            24,   // offsetof(zend_op, lineno)
		OpSize:              32,   // sizeof(zend_op)
		StringLen:           16,   // offsetof(zend_string, len)
		StringVal:           24,   // offsetof(zend_string, val)
	},
	"8.4": {
		ExecutorGlobalsSize: 1984, // dynsym st_size
		CurrentExecuteData:  488,  // offsetof(zend_executor_globals, current_execute_data)
		ExecuteDataOpline:   0,    // offsetof(zend_execute_data, opline)
		ExecuteDataFunc:     24,   // offsetof(zend_execute_data, func)
		ExecuteDataCallInfo: 40,   // offsetof(zend_execute_data, This) + offsetof(zval, u1.type_info)
		ExecuteDataPrev:     48,   // offsetof(zend_execute_data, prev_execute_data)
		FunctionType:        0,    // offsetof(zend_function, type)
		FunctionName:        8,    // offsetof(zend_function, common.function_name)
		FunctionScope:       16,   // offsetof(zend_function, common.scope)
		OpArrayLast:         96,   // offsetof(zend_op_array, last)
		OpArrayOpcodes:      104,  // offsetof(zend_op_array, opcodes)
		OpArrayFilename:     168,  // offsetof(zend_op_array, filename)
		OpArrayLineStart:    176,  // offsetof(zend_op_array, line_start)
		OpArrayLineEnd:      180,  // offsetof(zend_op_array, line_end)
		FunctionSize:        256,  // sizeof(zend_function)
		ClassName:           8,    // offsetof(zend_class_entry, name)
		OpLineno:            24,   // offsetof(zend_op, lineno)
		OpSize:              32,   // sizeof(zend_op)
		StringLen:           16,   // offsetof(zend_string, len)
		StringVal:           24,   // offsetof(zend_string, val)
	},
}

// covers reports whether FunctionSize bytes hold every zend_function field
// read, and an execute_data read of executeDataSize bytes every field of
// it: a table that does not is refused, not read past.
func (l *Layout) covers() bool {
	for _, end := range []uint32{l.FunctionType + 1, l.FunctionName + 8, l.FunctionScope + 8, l.OpArrayLast + 4,
		l.OpArrayOpcodes + 8, l.OpArrayFilename + 8, l.OpArrayLineStart + 4, l.OpArrayLineEnd + 4} {
		if end > l.FunctionSize {
			return false
		}
	}
	for _, end := range []uint32{l.ExecuteDataOpline + 8, l.ExecuteDataFunc + 8, l.ExecuteDataCallInfo + 4, l.ExecuteDataPrev + 8} {
		if end > executeDataSize {
			return false
		}
	}
	return l.OpLineno+4 <= l.OpSize && l.OpSize > 0 && l.StringVal >= l.StringLen+8
}

// executeDataSize is what the walk reads of a zend_execute_data: its
// fields up to prev_execute_data.
const executeDataSize = 56
