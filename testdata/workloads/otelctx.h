/*
 * otelctx.h: publishing an OpenTelemetry process context as an SDK does
 * (OTEP 4719): a memfd mapping named OTEL_CTX whose header points at a
 * protobuf ProcessContext, updated by the OTEP's protocol. Included by the
 * workloads that publish one (otelctx.c, spans.c).
 */
#ifndef OTELCTX_H
#define OTELCTX_H

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

/*
 * Encodes ProcessContext{resource: {service.name, service.instance.id,
 * deployment.environment.name}, attributes: the thread context's
 * threadlocal.* keys when keys (OTEP 4947: the names of its key indexes)}.
 */
static size_t encode(uint8_t *out, const char *service, const char *const *keys, int nkeys)
{
	uint8_t resource[512], array[256], any[300], kv[340];
	size_t n = attribute(resource, 0, 1, "service.name", service), m = 0, a, k;

	n = attribute(resource, n, 1, "service.instance.id", "7c3e2a10-0d4b-4f3c-9a51-1b2c3d4e5f60");
	n = attribute(resource, n, 1, "deployment.environment.name", "e2e");
	n = attribute(resource, n, 1, "process.pid", "1"); /* the SDK's view from its namespace */
	n = field(out, 0, 1, resource, n);
	if (!keys)
		return n;
	n = attribute(out, n, 2, "threadlocal.schema_version", "tlsdesc_v1_dev");
	for (int i = 0; i < nkeys; i++) {
		uint8_t value[80];
		size_t v = field(value, 0, 1, keys[i], strlen(keys[i])); /* AnyValue.string_value */

		m = field(array, m, 1, value, v); /* ArrayValue.values */
	}
	a = field(any, 0, 5, array, m);				  /* AnyValue.array_value */
	k = field(kv, 0, 1, "threadlocal.attribute_key_map", 29); /* KeyValue.key */
	k = field(kv, k, 2, any, a);				  /* KeyValue.value */
	return field(out, n, 2, kv, k);				  /* ProcessContext.attributes */
}

static uint64_t boottime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
}

/* Publishes (or updates) the process context; slot alternates the payload buffers. */
static void otelctx_publish(const char *service, const char *const *keys, int nkeys, int slot)
{
	size_t size = encode(payloads[slot], service, keys, nkeys);

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

#endif /* OTELCTX_H */
