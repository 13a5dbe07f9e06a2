// pingpong: a fixed number of pipe round trips between two threads, used by
// `make bench` to measure the slowdown an off-CPU profiler causes on a
// context-switch-heavy program.
//
// ping_thread writes one byte into a pipe and blocks reading the answer;
// pong_thread blocks reading it, does a little CPU work (spin_work) and writes
// the answer back. Both threads are pinned to one CPU (the last one the
// process may use), so each round trip is two direct thread-to-thread context
// switches; the spin work paces them at about 50k switches/s on an idle
// 2-CPU VM (the second argument tunes it).
//
// Every NAP_EVERY round trips pong_thread sleeps NAP_MS in pingpong_nap(),
// blocking ping_thread as long: those blocks are longer than a 1 ms min_block,
// so a working off-CPU profiler must name pingpong_nap (the bench checks it),
// while the ~40 µs blocks of the ping-pong itself fall below the threshold.
// The naps are part of the fixed work, the same in every scenario.
//
// Usage: pingpong [round_trips [spin]]   (defaults 100000 and 17000, ~4 s)
// Prints its own wall time in nanoseconds on stdout at exit (one line). On
// stderr: a checksum (so the compiler cannot drop the work), the rate of
// voluntary context switches, and "pingpong: cpu_ns N", the CPU time
// (user+system) of the process.
//
// Build: cc -O2 -g -fno-omit-frame-pointer -pthread -o pingpong pingpong.c
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_ROUND_TRIPS 100000UL
#define DEFAULT_SPIN 17000UL
#define NAP_EVERY 10000UL
#define NAP_MS 2

static unsigned long round_trips = DEFAULT_ROUND_TRIPS;
static unsigned long spin = DEFAULT_SPIN;
static int to_pong[2], to_ping[2];

static void die(const char *what) {
	perror(what);
	exit(1);
}

// A serial chain of multiplies and xors, spin rounds long.
__attribute__((noinline)) static uint64_t spin_work(uint64_t x) {
	for (unsigned long i = 0; i < spin; i++) {
		x ^= x >> 31;
		x *= 0xd6e8feb86659fd93ULL;
		x += i;
	}
	return x;
}

// nap_sleep is a separate frame so that pingpong_nap stays in a frame-pointer
// unwound stack even though libc's nanosleep wrapper pushes no frame.
__attribute__((noinline)) static void nap_sleep(void) {
	struct timespec ts = {0, NAP_MS * 1000000L};
	while (nanosleep(&ts, &ts) != 0) {
		if (errno != EINTR) {
			die("nanosleep");
		}
	}
}

__attribute__((noinline)) void pingpong_nap(void) {
	nap_sleep();
	__asm__ volatile("" ::: "memory"); // keep the call from becoming a tail call
}

static void put(int fd, char c) {
	while (write(fd, &c, 1) != 1) {
		if (errno != EINTR) {
			die("write");
		}
	}
}

static char get(int fd) {
	char c;
	for (;;) {
		ssize_t n = read(fd, &c, 1);
		if (n == 1) {
			return c;
		}
		if (n == 0) {
			fprintf(stderr, "pingpong: unexpected end of pipe\n");
			exit(1);
		}
		if (errno != EINTR) {
			die("read");
		}
	}
}

struct job {
	uint64_t acc;
};

__attribute__((noinline)) static void *ping_thread(void *arg) {
	struct job *j = arg;
	char c = 0;
	for (unsigned long n = 0; n < round_trips; n++) {
		put(to_pong[1], c);
		c = get(to_ping[0]);
		j->acc += (uint64_t)(unsigned char)c;
	}
	return NULL;
}

__attribute__((noinline)) static void *pong_thread(void *arg) {
	struct job *j = arg;
	for (unsigned long n = 0; n < round_trips; n++) {
		char c = get(to_pong[0]);
		j->acc = spin_work(j->acc + (uint64_t)(unsigned char)c);
		if (n % NAP_EVERY == NAP_EVERY - 1) {
			pingpong_nap();
		}
		put(to_ping[1], (char)(j->acc & 0x7f));
	}
	return NULL;
}

static uint64_t now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static unsigned long parse_arg(const char *s, const char *what) {
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno != 0 || *end != '\0' || end == s || v == 0) {
		fprintf(stderr, "pingpong: bad %s \"%s\"\n", what, s);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv) {
	if (argc > 3) {
		fprintf(stderr, "usage: %s [round_trips [spin]]\n", argv[0]);
		return 2;
	}
	if (argc >= 2) {
		round_trips = parse_arg(argv[1], "round_trips");
	}
	if (argc == 3) {
		spin = parse_arg(argv[2], "spin");
	}
	if (pipe(to_pong) != 0 || pipe(to_ping) != 0) {
		die("pipe");
	}

	// Both threads on one CPU: every round trip is then two direct
	// thread-to-thread switches, with no cross-CPU wakeup, whose latency
	// on a VM varies tenfold from run to run.
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) != 0) {
		die("sched_getaffinity");
	}
	int last = -1;
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (CPU_ISSET(c, &set)) {
			last = c;
		}
	}
	CPU_ZERO(&set);
	CPU_SET(last, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0) {
		die("sched_setaffinity");
	}

	struct rusage r0, r1;
	getrusage(RUSAGE_SELF, &r0);
	struct job ping = {0x9e3779b97f4a7c15ULL}, pong = {0xbf58476d1ce4e5b9ULL};
	pthread_t t_ping, t_pong;
	uint64_t start = now_ns();
	int err = pthread_create(&t_pong, NULL, pong_thread, &pong);
	if (err == 0) {
		err = pthread_create(&t_ping, NULL, ping_thread, &ping);
	}
	if (err != 0) {
		fprintf(stderr, "pingpong: pthread_create: error %d\n", err);
		return 1;
	}
	pthread_join(t_ping, NULL);
	pthread_join(t_pong, NULL);
	uint64_t elapsed = now_ns() - start;
	getrusage(RUSAGE_SELF, &r1);

	uint64_t cpu = ((uint64_t)r1.ru_utime.tv_sec + (uint64_t)r1.ru_stime.tv_sec) * 1000000000ULL +
		((uint64_t)r1.ru_utime.tv_usec + (uint64_t)r1.ru_stime.tv_usec) * 1000ULL;
	long switches = (r1.ru_nvcsw - r0.ru_nvcsw) + (r1.ru_nivcsw - r0.ru_nivcsw);

	fprintf(stderr, "pingpong: %lu round trips, spin %lu, checksum %016llx\n",
		round_trips, spin, (unsigned long long)(ping.acc ^ pong.acc));
	fprintf(stderr, "pingpong: switches_per_s %.0f\n", (double)switches * 1e9 / (double)elapsed);
	fprintf(stderr, "pingpong: cpu_ns %llu\n", (unsigned long long)cpu);
	printf("%llu\n", (unsigned long long)elapsed);
	return 0;
}
