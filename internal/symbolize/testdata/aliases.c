/* Fixture of FindFunctions: a function and an alias of it. */
__attribute__((noinline)) int probe_target(int x) { return x * 3 + 1; }
int probe_target_alias(int x) __attribute__((alias("probe_target")));

int main(int argc, char **argv)
{
	(void)argv;
	return probe_target(argc) + probe_target_alias(argc);
}
