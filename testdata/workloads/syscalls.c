// syscalls: spends its time in the kernel, for kernel-stack tests.
// Loops reading /dev/zero and writing /dev/null in 64 KiB chunks plus a
// getppid() for N seconds (argv[1], default 5). Prints its pid first.
// Build: cc -O1 -g -fno-omit-frame-pointer -o syscalls syscalls.c
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	static char buf[65536];
	double until = now() + (argc > 1 ? atof(argv[1]) : 5);
	int zero = open("/dev/zero", O_RDONLY);
	int null = open("/dev/null", O_WRONLY);

	if (zero < 0 || null < 0) {
		perror("open");
		return 1;
	}
	printf("%d\n", getpid());
	fflush(stdout);
	while (now() < until) {
		for (int i = 0; i < 64; i++) {
			if (read(zero, buf, sizeof(buf)) < 0 || write(null, buf, sizeof(buf)) < 0) {
				perror("io");
				return 1;
			}
			getppid();
		}
	}
	return 0;
}
