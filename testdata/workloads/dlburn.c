// dlburn: burns CPU in its own code for a second, then loads LIBRARY
// (dlchain.c) with dlopen and burns CPU in it: its mappings change after a
// profiler has read them, as a plugin's or a JIT's do.
// cflags: -O2 -fomit-frame-pointer
//
// Usage: dlburn LIBRARY SECONDS [stdin]. Prints its pid first. With stdin
// it burns its own code until a line arrives on its standard input (a test
// then knows its first mappings were read), else for a second.
#include <dlfcn.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Burns for seconds, then, with wait, until standard input is readable. */
__attribute__((noinline)) static void own_burn(double seconds, int wait)
{
	double until = now() + seconds;
	struct pollfd in = { .fd = 0, .events = POLLIN };

	while (now() < until || (wait && poll(&in, 1, 0) == 0))
		sink++;
}

int main(int argc, char **argv)
{
	void (*entry)(double);
	void *lib;

	if (argc != 3 && argc != 4) {
		fprintf(stderr, "usage: %s LIBRARY SECONDS [stdin]\n", argv[0]);
		return 2;
	}
	printf("%d\n", getpid());
	fflush(stdout);
	own_burn(1.0, argc == 4);
	lib = dlopen(argv[1], RTLD_NOW);
	if (!lib) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	entry = (void (*)(double))dlsym(lib, "dl_entry");
	if (!entry) {
		fprintf(stderr, "dlsym: %s\n", dlerror());
		return 1;
	}
	entry(atof(argv[2]));
	sink++;
	return 0;
}
