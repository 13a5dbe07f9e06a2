// otelctx: publishes an OpenTelemetry process context as an SDK does (OTEP
// 4719: a memfd mapping named OTEL_CTX, its header pointing at a protobuf
// ProcessContext), burns CPU in ctx_burn, and after the given seconds
// publishes again by the updating protocol with service.name suffixed
// "-v2". Prints its pid.
// Usage: otelctx [seconds] [republish after seconds]  (defaults 10, 0: never).
// cflags: -O1
#define _GNU_SOURCE
#include "otelctx.h"

static volatile uint64_t sink;

__attribute__((noinline)) uint64_t ctx_burn(uint64_t seed)
{
	for (int i = 0; i < 100000; i++) {
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
	}
	return seed;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10, again = argc > 2 ? atof(argv[2]) : 0;
	double start = now();
	uint64_t seed = 1;
	int republished = 0;

	otelctx_publish("otelctx-checkout", NULL, 0, 0);
	printf("%d\n", getpid());
	fflush(stdout);
	while (now() - start < seconds) {
		seed = ctx_burn(seed);
		if (again > 0 && !republished && now() - start >= again) {
			otelctx_publish("otelctx-checkout-v2", NULL, 0, 1);
			republished = 1;
		}
	}
	sink = seed;
	return 0;
}
