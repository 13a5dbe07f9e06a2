// sleepers: threads that block in known functions, for off-CPU tests.
//
// Usage: sleepers MODE ITERATIONS
// Prints its pid, then waits for a line on stdin before the threads start,
// so a tracer can be attached first. At exit it prints, per function, the
// off-CPU time it measured itself: the CLOCK_MONOTONIC time around each
// sleep less the thread's CPU time in it (the system call's own cost, large
// under emulation), i.e. the time from going to sleep until running again,
// and the wall time around the sleeps:
//   <function> <total ns> <sleeps> <ns in sleeps >= 1 ms> <sleeps >= 1 ms> <wall ns>
// (the middle two let a test with min_block 1ms tell which short sleeps a
// busy machine stretched past the threshold). A tracer's switch-out to
// switch-in time lies between the two totals: the CPU time subtracted
// includes the scheduler's and the tracer's own work at the switch-in, which
// the kernel charges to the thread though it was not yet running its code
// (microseconds natively, far more under emulation).
// and, for the migration mode, "cross_cpu_wakeups <n>"; then "done". It
// exits when stdin is closed, so its maps stay readable until then.
//
// Modes (each thread runs ITERATIONS sleeps):
//   ratio    sleep_long (30 ms) and sleep_short (10 ms) in two threads
//   migrate  sleep_migrate (10 ms) in a thread whose CPU affinity another
//            thread flips between CPU 0 and 1 every 7 ms, so it often wakes
//            on another CPU than the one it slept on
//   minblock sleep_tiny (100 us) and sleep_medium (5 ms) in two threads
//
// The nanosleep system call is issued inline (no libc wrapper, which has no
// frame pointer), so frame-pointer unwinding from the kernel entry reaches
// the sleep_* function.
// Build: cc -O1 -g -fno-omit-frame-pointer -pthread -o sleepers sleepers.c
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define OVER_NS 1000000u

static uint64_t clock_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

static inline __attribute__((always_inline)) long raw_nanosleep(const struct timespec *req)
{
	long ret;
#if defined(__x86_64__)
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "0"((long)SYS_nanosleep), "D"(req), "S"(0L)
			 : "rcx", "r11", "memory");
#elif defined(__aarch64__)
	register long x8 __asm__("x8") = SYS_nanosleep;
	register long x0 __asm__("x0") = (long)req;
	register long x1 __asm__("x1") = 0;
	__asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1) : "memory");
	ret = x0;
#else
#error "unsupported architecture"
#endif
	return ret;
}

struct sleeper {
	const char *name;
	uint64_t (*fn)(uint64_t ns, uint64_t *wall);
	uint64_t ns;
	long iterations;
	uint64_t total_ns;
	uint64_t wall_ns;
	long sleeps;
	uint64_t over_ns; /* in sleeps of at least OVER_NS */
	long over;
	long cross_cpu;
};

/*
 * Each sleep_* blocks once for ns and returns the time it was off the CPU:
 * the wall time around the sleep (also stored in *wall) less the thread's
 * CPU time in it.
 */
#define SLEEPER(name)                                                       \
	__attribute__((noinline)) uint64_t name(uint64_t ns, uint64_t *wall) \
	{                                                                   \
		struct timespec req = {ns / 1000000000u, ns % 1000000000u};   \
		uint64_t c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);            \
		uint64_t t0 = now_ns();                                     \
		raw_nanosleep(&req);                                        \
		uint64_t t1 = now_ns();                                     \
		uint64_t c1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);            \
		__asm__ volatile("" ::: "memory");                          \
		*wall = t1 - t0;                                            \
		return *wall > c1 - c0 ? *wall - (c1 - c0) : 0;             \
	}

SLEEPER(sleep_long)
SLEEPER(sleep_short)
SLEEPER(sleep_migrate)
SLEEPER(sleep_tiny)
SLEEPER(sleep_medium)

static void *run(void *arg)
{
	struct sleeper *s = arg;
	/*
	 * Real-time priority (when permitted) makes wakeups prompt on a busy
	 * machine, so the blocked times stay close to the requested ones.
	 */
	struct sched_param prio = {.sched_priority = 10};
	pthread_setschedparam(pthread_self(), SCHED_FIFO, &prio);
	for (long i = 0; i < s->iterations; i++) {
		int before = sched_getcpu();
		uint64_t wall;
		uint64_t d = s->fn(s->ns, &wall);
		s->total_ns += d;
		s->wall_ns += wall;
		s->sleeps++;
		if (d >= OVER_NS) {
			s->over_ns += d;
			s->over++;
		}
		if (sched_getcpu() != before)
			s->cross_cpu++;
	}
	return NULL;
}

static volatile int flipping = 1;

/* Moves the target thread between CPU 0 and CPU 1 every 7 ms. */
static void *flip(void *arg)
{
	pid_t tid = *(pid_t *)arg;
	for (int cpu = 0; flipping; cpu ^= 1) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		sched_setaffinity(tid, sizeof(set), &set);
		struct timespec d = {0, 7000000};
		nanosleep(&d, NULL);
	}
	return NULL;
}

static pid_t migrate_tid;

static void *run_migrate(void *arg)
{
	__atomic_store_n(&migrate_tid, (pid_t)syscall(SYS_gettid), __ATOMIC_SEQ_CST);
	return run(arg);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s ratio|migrate|minblock ITERATIONS\n", argv[0]);
		return 2;
	}
	long n = atol(argv[2]);
	struct sleeper s[2];
	int threads = 2;
	memset(s, 0, sizeof(s));
	if (strcmp(argv[1], "ratio") == 0) {
		s[0] = (struct sleeper){"sleep_long", sleep_long, 30000000, n};
		s[1] = (struct sleeper){"sleep_short", sleep_short, 10000000, n};
	} else if (strcmp(argv[1], "minblock") == 0) {
		s[0] = (struct sleeper){"sleep_tiny", sleep_tiny, 100000, n};
		s[1] = (struct sleeper){"sleep_medium", sleep_medium, 5000000, n};
	} else if (strcmp(argv[1], "migrate") == 0) {
		s[0] = (struct sleeper){"sleep_migrate", sleep_migrate, 10000000, n};
		threads = 1;
	} else {
		fprintf(stderr, "unknown mode %s\n", argv[1]);
		return 2;
	}

	printf("%d\n", (int)getpid());
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof(line), stdin))
		return 1;

	pthread_t t[2], flipper;
	for (int i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, threads == 1 ? run_migrate : run, &s[i]);
	if (threads == 1) {
		while (__atomic_load_n(&migrate_tid, __ATOMIC_SEQ_CST) == 0)
			sched_yield();
		pthread_create(&flipper, NULL, flip, &migrate_tid);
	}
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	if (threads == 1) {
		flipping = 0;
		pthread_join(flipper, NULL);
		printf("cross_cpu_wakeups %ld\n", s[0].cross_cpu);
	}
	for (int i = 0; i < threads; i++)
		printf("%s %llu %ld %llu %ld %llu\n", s[i].name, (unsigned long long)s[i].total_ns, s[i].sleeps,
		       (unsigned long long)s[i].over_ns, s[i].over, (unsigned long long)s[i].wall_ns);
	printf("done\n");
	fflush(stdout);
	/* Stay alive (maps readable for symbolization) until stdin closes. */
	while (fgets(line, sizeof(line), stdin))
		;
	return 0;
}
