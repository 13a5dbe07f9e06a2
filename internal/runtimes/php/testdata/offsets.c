// offsets.c prints the Zend engine offsets of docs/php-layouts.md ([H]) for
// the headers it is compiled against: unpack php<version>-dev (dpkg-deb -x),
// then, with I=<root>/usr/include/php/<api>:
//   gcc -o offsets offsets.c -I$I -I$I/main -I$I/Zend -I$I/TSRM && ./offsets
#define _GNU_SOURCE
#include <stdio.h>
#include "php_version.h"
#include <stddef.h>
#include "zend.h"
#include "zend_compile.h"
#include "zend_globals.h"
#include "zend_vm_opcodes.h"
#define O(t, f) printf("offsetof(%s, %s) = %zu\n", #t, #f, offsetof(t, f))
#define S(t) printf("sizeof(%s) = %zu\n", #t, sizeof(t))
#define C(c) printf("%s = %#lx\n", #c, (unsigned long)(c))
int main(void) {
	printf("PHP_VERSION %s ZEND_VM_KIND %d ZTS %d\n", PHP_VERSION, ZEND_VM_KIND,
#ifdef ZTS
	1
#else
	0
#endif
	);
	O(zend_executor_globals, current_execute_data);
	O(zend_execute_data, opline);
	O(zend_execute_data, call);
	O(zend_execute_data, func);
	O(zend_execute_data, This);
	O(zend_execute_data, prev_execute_data);
	printf("offsetof(zend_execute_data, This.u1.type_info) = %zu\n", offsetof(zend_execute_data, This) + offsetof(zval, u1.type_info));
	S(zend_execute_data);
	O(zend_function, type);
	O(zend_function, common.fn_flags);
	O(zend_function, common.function_name);
	O(zend_function, common.scope);
	O(zend_op_array, last);
	O(zend_op_array, opcodes);
	O(zend_op_array, filename);
	O(zend_op_array, line_start);
	O(zend_op_array, line_end);
	S(zend_op_array);
	S(zend_internal_function);
	S(zend_function);
	O(zend_class_entry, type);
	O(zend_class_entry, name);
	O(zend_op, handler);
	O(zend_op, lineno);
	O(zend_op, opcode);
	S(zend_op);
	O(zend_string, len);
	O(zend_string, val);
	O(zend_string, h);
	C(ZEND_USER_FUNCTION); C(ZEND_INTERNAL_FUNCTION); C(ZEND_EVAL_CODE);
	C(ZEND_CALL_TOP); C(ZEND_CALL_CODE); C(ZEND_CALL_NESTED); C(ZEND_CALL_FUNCTION); C(ZEND_CALL_HAS_THIS);
	C(ZEND_CALL_ALLOCATED); C(ZEND_CALL_TOP_CODE); C(ZEND_CALL_TOP_FUNCTION);
	C(ZEND_ACC_CLOSURE);
	return 0;
}
