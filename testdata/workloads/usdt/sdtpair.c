// sdtpair: USDT probes around sleeps of known length, for the USDT probe
// tests of internal/probes: work:start and work:done in the executable,
// guarded by semaphores (work:done at two sites), and sdtlib:start and
// sdtlib:done in the library LIBRARY (sdtlib.c), loaded with dlopen.
// work:start's arguments are of known values, in each place a note can
// put one at -O2: the scope's length in ms (a register), -3 times it (a
// stack variable: memory at a register plus an offset), 42 (a constant)
// and the string "work-<ms>" (a pointer, in a register).
// Its own directory: the kernel matrix builds testdata/workloads/*.c with
// a cross compiler that has no <sys/sdt.h>.
//
// Usage: sdtpair LIBRARY OUT. Writes "ready" to OUT once LIBRARY is
// loaded, then for each line on its standard input runs a round: sleeps of
// 10, 20 and 30 ms between work:start and work:done, then the same in the
// library, writing "<kind> <enabled> <start ns> <end ns>" per sleep (kind
// work or lib; enabled: the probe's semaphore was set; CLOCK_MONOTONIC
// read around the probes) and "round N done". Exits at end of input.
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile unsigned short work_start_semaphore __attribute__((section(".probes")));
volatile unsigned short work_done_semaphore __attribute__((section(".probes")));

static uint64_t now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = ms * 1000000L };
	nanosleep(&ts, NULL);
}

/* One scope of ms milliseconds between work:start and work:done; the
 * probes fire only while their semaphores are set. */
__attribute__((noinline)) static int work(int ms)
{
	int enabled = work_start_semaphore != 0;
	volatile int weight = -3 * ms; /* volatile: in memory */
	char name[16];

	snprintf(name, sizeof(name), "work-%d", ms);
	if (work_start_semaphore)
		STAP_PROBE4(work, start, ms, weight, 42, name);
	sleep_ms(ms);
	if (work_done_semaphore) {
		if (ms % 20)
			STAP_PROBE2(work, done, ms, 1);
		else
			STAP_PROBE2(work, done, ms, 2);
	}
	return enabled;
}

int main(int argc, char **argv)
{
	static const int lengths[] = { 10, 20, 30 };
	void (*lib_scope)(int);
	char line[64];
	FILE *out;
	void *lib;

	if (argc != 3) {
		fprintf(stderr, "usage: %s LIBRARY OUT\n", argv[0]);
		return 2;
	}
	lib = dlopen(argv[1], RTLD_NOW);
	if (!lib || !(lib_scope = (void (*)(int))dlsym(lib, "lib_scope"))) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	out = fopen(argv[2], "w");
	if (!out)
		return 1;
	fprintf(out, "ready\n");
	fflush(out);
	for (int round = 1; fgets(line, sizeof(line), stdin); round++) {
		for (int i = 0; i < 3; i++) {
			uint64_t start = now();
			int enabled = work(lengths[i]);
			fprintf(out, "work %d %llu %llu\n", enabled, (unsigned long long)start, (unsigned long long)now());
		}
		for (int i = 0; i < 3; i++) {
			uint64_t start = now();
			lib_scope(lengths[i]);
			fprintf(out, "lib 1 %llu %llu\n", (unsigned long long)start, (unsigned long long)now());
		}
		fprintf(out, "round %d done\n", round);
		fflush(out);
	}
	return 0;
}
