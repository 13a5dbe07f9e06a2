/* A small shared library: exported functions found through .dynsym. */
int exported_fn(int x) { return x * 3 + 1; }
int exported_other(int x) { return exported_fn(x) - 2; }
static int local_fn(int x) { return x + 7; }
int (*keep_local)(int) = local_fn;
