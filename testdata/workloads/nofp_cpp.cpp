// nofp_cpp: a call chain in C++ built without frame pointers, through a
// try block whose callee throws now and then, for the unwinder's tests:
// main -> cpp_a -> cpp_b -> cpp_leaf, the leaf burning CPU.
// cflags: -O2 -fomit-frame-pointer
// Usage: nofp_cpp [seconds]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <unistd.h>
#include <vector>

static volatile uint64_t sink;

__attribute__((noinline)) uint64_t cpp_leaf(uint64_t seed)
{
	for (int i = 0; i < 200000; i++) {
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
	}
	if ((seed & 1023) == 7)
		throw std::runtime_error("unlucky");
	sink = seed;
	return seed;
}

__attribute__((noinline)) uint64_t cpp_b(uint64_t seed)
{
	std::vector<uint64_t> v(8, seed);
	try {
		return cpp_leaf(v[seed & 7] + 1) + v[3];
	} catch (const std::exception &) {
		return 1;
	}
}

__attribute__((noinline)) uint64_t cpp_a(uint64_t seed)
{
	return cpp_b(seed * 3) ^ 5;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 5;
	auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
	uint64_t acc = 0, seed = 1;

	printf("%d\n", getpid());
	fflush(stdout);
	while (std::chrono::steady_clock::now() < end)
		acc += cpp_a(seed++);
	sink = acc;
	return 0;
}
