// Workload of the probe test for thread exit inside a scope. Driven line by
// line from stdin; answers on stdout (line buffered):
//
//   <line>  a thread calls scope_begin(), prints "inside <tid>" and waits
//   <line>  that thread exits with pthread_exit, never calling scope_end();
//           once joined: "exited"
//   <line>  a new thread runs scope_begin(); 30 ms; scope_end() and prints
//           "pair <tid> <start_ns> <end_ns>" (CLOCK_MONOTONIC around the
//           pair), then "done"; the process exits.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) void scope_begin(void) { __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void scope_end(void) { __asm__ volatile("" ::: "memory"); }

static unsigned long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static int wait_line(void)
{
	char line[16];
	return fgets(line, sizeof(line), stdin) != NULL;
}

static void *leaver(void *arg)
{
	(void)arg;
	scope_begin();
	printf("inside %d\n", gettid());
	if (!wait_line())
		exit(1);
	pthread_exit(NULL); /* inside the scope */
}

static void *pair(void *arg)
{
	(void)arg;
	unsigned long long s = now_ns();
	scope_begin();
	struct timespec ts = {0, 30 * 1000000L};
	while (nanosleep(&ts, &ts) != 0)
		;
	scope_end();
	printf("pair %d %llu %llu\n", gettid(), s, now_ns());
	return NULL;
}

int main(void)
{
	pthread_t th;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!wait_line() || pthread_create(&th, NULL, leaver, NULL) != 0)
		return 1;
	pthread_join(th, NULL);
	printf("exited\n");
	if (!wait_line() || pthread_create(&th, NULL, pair, NULL) != 0)
		return 1;
	pthread_join(th, NULL);
	printf("done\n");
	return 0;
}
