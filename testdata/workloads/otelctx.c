// otelctx: publishes an OpenTelemetry process context as an SDK does (OTEP
// 4719: a memfd mapping named OTEL_CTX, its header pointing at a protobuf
// ProcessContext), burns CPU in ctx_burn, and after the given seconds
// publishes again by the updating protocol with service.name suffixed
// "-v2". Prints its pid.
// Usage: otelctx [seconds] [republish after seconds]  (defaults 10, 0: never).
// cflags: -O1
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif
#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif

struct header {
	char signature[8];
	uint32_t version;
	uint32_t payload_size;
	volatile uint64_t published_at_ns;
	uint64_t payload;
};

static volatile uint64_t sink;
static struct header *hdr;
static uint8_t payloads[2][1024];

/* Appends a length-delimited field (field numbers < 16, lengths < 16384) to out. */
static size_t field(uint8_t *out, size_t at, int number, const void *data, size_t len)
{
	if (len >= 16384 || at + 3 + len > sizeof(payloads[0])) {
		fprintf(stderr, "otelctx: field too long\n");
		exit(1);
	}
	out[at++] = (uint8_t)(number << 3 | 2);
	if (len >= 128)
		out[at++] = (uint8_t)((len & 0x7f) | 0x80);
	out[at++] = (uint8_t)(len >= 128 ? len >> 7 : len);
	memcpy(out + at, data, len);
	return at + len;
}

/* A KeyValue with a string value, appended as field number of out. */
static size_t attribute(uint8_t *out, size_t at, int number, const char *key, const char *value)
{
	uint8_t any[160], kv[320];
	size_t n = field(any, 0, 1, value, strlen(value)); /* AnyValue.string_value */
	size_t m = field(kv, 0, 1, key, strlen(key));	   /* KeyValue.key */

	m = field(kv, m, 2, any, n); /* KeyValue.value */
	return field(out, at, number, kv, m);
}

/* Encodes ProcessContext{resource: {service.name, service.instance.id, deployment.environment.name}}. */
static size_t encode(uint8_t *out, const char *service)
{
	uint8_t resource[512];
	size_t n = attribute(resource, 0, 1, "service.name", service);

	n = attribute(resource, n, 1, "service.instance.id", "7c3e2a10-0d4b-4f3c-9a51-1b2c3d4e5f60");
	n = attribute(resource, n, 1, "deployment.environment.name", "e2e");
	n = attribute(resource, n, 1, "process.pid", "1"); /* the SDK's view from its namespace */
	return field(out, 0, 1, resource, n);
}

static uint64_t boottime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
}

static void publish(const char *service, int slot)
{
	size_t size = encode(payloads[slot], service);

	if (!hdr) {
		int fd = memfd_create("OTEL_CTX", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL);

		if (fd < 0)
			fd = memfd_create("OTEL_CTX", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (fd < 0 || ftruncate(fd, 4096)) {
			perror("otelctx: memfd");
			exit(1);
		}
		hdr = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
		close(fd);
		if (hdr == MAP_FAILED) {
			perror("otelctx: mmap");
			exit(1);
		}
		madvise(hdr, 4096, MADV_DONTFORK);
		memcpy(hdr->signature, "OTEL_CTX", 8);
		hdr->version = 2;
	} else {
		hdr->published_at_ns = 0; /* being updated */
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
	}
	hdr->payload_size = (uint32_t)size;
	hdr->payload = (uint64_t)(uintptr_t)payloads[slot];
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	hdr->published_at_ns = boottime_ns();
	prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, hdr, 4096, "OTEL_CTX"); /* may fail: the memfd names it */
}

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

	publish("otelctx-checkout", 0);
	printf("%d\n", getpid());
	fflush(stdout);
	while (now() - start < seconds) {
		seed = ctx_burn(seed);
		if (again > 0 && !republished && now() - start >= again) {
			publish("otelctx-checkout-v2", 1);
			republished = 1;
		}
	}
	sink = seed;
	return 0;
}
