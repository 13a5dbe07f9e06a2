// Fixture for symbolize tests: prints the addresses of known functions,
// then waits for stdin to close.
#include <stdio.h>

void *caller_pc;

__attribute__((noinline)) void record_caller(void) {
	caller_pc = __builtin_return_address(0);
}

__attribute__((noinline)) int leaf_func(int x) {
	return x * 3 + 1;
}

__attribute__((noinline)) int mid_func(int x) {
	record_caller();
	return leaf_func(x) + 2;
}

int main(void) {
	int v = mid_func(4);
	printf("leaf_func=%p\n", (void *)leaf_func);
	printf("mid_func=%p\n", (void *)mid_func);
	printf("mid_func_ret=%p\n", caller_pc);
	printf("ready %d\n", v);
	fflush(stdout);
	while (getchar() != EOF) {
	}
	return 0;
}
