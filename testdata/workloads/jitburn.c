// jitburn: burns CPU in "JIT-compiled" code, for perf-map symbolization tests.
//
// It copies a small hand-assembled loop (x86-64 or aarch64, which keeps the
// frame-pointer convention) into an anonymous executable mapping, announces it in
// /tmp/perf-<pid>.map the way JIT runtimes do (pid as the process sees
// itself, so inside a pid namespace it is the namespace-local pid), and calls
// it until argv[1] seconds (default 5) have passed. Prints its pid first.
// Build: cc -O1 -g -fno-omit-frame-pointer -o jitburn jitburn.c
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
/*
 * push %rbp; mov %rsp,%rbp; 1: dec %rdi; jnz 1b; pop %rbp; ret
 * (rdi is the iteration count)
 */
static const uint8_t loop_code[] = {
	0x55, 0x48, 0x89, 0xe5, 0x48, 0xff, 0xcf, 0x75, 0xfb, 0x5d, 0xc3,
};
#elif defined(__aarch64__)
/*
 * stp x29, x30, [sp, #-16]!; mov x29, sp; 1: subs x0, x0, #1; b.ne 1b;
 * ldp x29, x30, [sp], #16; ret (x0 is the iteration count)
 */
static const uint32_t loop_code[] = {
	0xa9bf7bfd, 0x910003fd, 0xf1000400, 0x54ffffe1, 0xa8c17bfd, 0xd65f03c0,
};
#else
#error "jitburn has its loop for x86-64 and aarch64"
#endif

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static void call_jit(void (*fn)(uint64_t))
{
	fn(2000000);
}

int main(int argc, char **argv)
{
	double until = now() + (argc > 1 ? atof(argv[1]) : 5);
	char path[64];
	FILE *f;
	void *code;

	printf("%d\n", getpid());
	fflush(stdout);
	code = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (code == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	memcpy(code, loop_code, sizeof(loop_code));
	__builtin___clear_cache((char *)code, (char *)code + sizeof(loop_code));
	snprintf(path, sizeof(path), "/tmp/perf-%d.map", getpid());
	f = fopen(path, "w");
	if (!f) {
		perror(path);
		return 1;
	}
	fprintf(f, "%lx %zx jit_hot_loop\n", (unsigned long)code, sizeof(loop_code));
	fclose(f);
	while (now() < until)
		call_jit((void (*)(uint64_t))code);
	unlink(path);
	return 0;
}
