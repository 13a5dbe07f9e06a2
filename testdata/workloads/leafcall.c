// leafcall: a thread spending its time in a leaf function, for the
// leaf-caller tests. leaf_spin calls nothing, so on arm64 it saves no frame
// record (GCC omits leaf frame records there even with frame pointers): its
// caller, spin_caller, is in x30 alone while it runs.
//
//   leafcall <seconds>
//
// Prints its pid first.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;

__attribute__((noinline)) uint64_t leaf_spin(uint64_t seed)
{
	for (int i = 0; i < (1 << 16); i++) {
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
	}
	return seed;
}

__attribute__((noinline)) void spin_caller(time_t until)
{
	uint64_t seed = 88172645463325252ull;

	while (time(NULL) < until) {
		for (int i = 0; i < 64; i++)
			seed = leaf_spin(seed);
		sink = seed;
	}
}

int main(int argc, char **argv)
{
	long seconds = argc > 1 ? atol(argv[1]) : 5;

	printf("%d\n", (int)getpid());
	fflush(stdout);
	spin_caller(time(NULL) + seconds);
	return 0;
}
