// Workload of the probe tests: calls functions of known durations and writes
// its own measurement of each call (CLOCK_MONOTONIC, around the call) to a
// file, one line per call: "<kind> <tid> <start_ns> <end_ns>".
//
//   scopes <out file> <delay ms | "stdin">
//
// With "stdin" it starts after reading a line from stdin; otherwise after the
// delay. Then:
//   timed   timed_scope(ms) on the main thread for each of MAIN_MS
//   worker  timed_scope(15) twice on a second thread
//   nested  nested_scope(3, 20): recursion, only the outermost call counts
//   pair    scope_begin(); scope_begin(); 40 ms; scope_end(); scope_end();
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const int MAIN_MS[] = {2, 12, 30, 50, 25, 1, 1, 1, 15, 8};
static FILE *out;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0)
		;
}

static void report(const char *kind, unsigned long long start, unsigned long long end)
{
	pthread_mutex_lock(&out_lock);
	fprintf(out, "%s %d %llu %llu\n", kind, gettid(), start, end);
	fflush(out);
	pthread_mutex_unlock(&out_lock);
}

__attribute__((noinline)) void timed_scope(int ms)
{
	sleep_ms(ms);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void nested_scope(int depth, int ms)
{
	if (depth > 0)
		nested_scope(depth - 1, ms);
	else
		sleep_ms(ms);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void scope_begin(void) { __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void scope_end(void) { __asm__ volatile("" ::: "memory"); }

static void *worker(void *arg)
{
	(void)arg;
	for (int i = 0; i < 2; i++) {
		unsigned long long s = now_ns();
		timed_scope(15);
		report("worker", s, now_ns());
	}
	return NULL;
}

int main(int argc, char **argv)
{
	unsigned long long s;
	pthread_t th;
	char line[16];

	if (argc != 3) {
		fprintf(stderr, "usage: %s <out file> <delay ms | stdin>\n", argv[0]);
		return 2;
	}
	out = fopen(argv[1], "w");
	if (!out) {
		perror("open output");
		return 1;
	}
	if (strcmp(argv[2], "stdin") == 0) {
		if (!fgets(line, sizeof(line), stdin))
			return 1;
	} else {
		sleep_ms(atoi(argv[2]));
	}

	for (size_t i = 0; i < sizeof(MAIN_MS) / sizeof(MAIN_MS[0]); i++) {
		s = now_ns();
		timed_scope(MAIN_MS[i]);
		report("timed", s, now_ns());
	}
	if (pthread_create(&th, NULL, worker, NULL) != 0)
		return 1;
	pthread_join(th, NULL);

	s = now_ns();
	nested_scope(3, 20);
	report("nested", s, now_ns());

	s = now_ns();
	scope_begin();
	scope_begin();
	sleep_ms(40);
	scope_end();
	scope_end();
	report("pair", s, now_ns());

	fprintf(out, "done\n");
	fclose(out);
	return 0;
}
