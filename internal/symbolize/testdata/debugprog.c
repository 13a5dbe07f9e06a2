// Fixture for the debug file tests: prints the address of a static
// function (in no dynamic symbol table) and the return address of a thread
// function into libc's start_thread, keeps that thread blocked, and waits
// for stdin to close.
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <unistd.h>

static sem_t started;
static void *thread_ret;

static __attribute__((noinline)) int hidden_func(int x) {
	return x * 7 + 3;
}

static void *blocked_thread(void *arg) {
	(void)arg;
	thread_ret = __builtin_return_address(0);
	sem_post(&started);
	for (;;) {
		pause();
	}
	return NULL;
}

int main(void) {
	pthread_t t;
	sem_init(&started, 0, 0);
	if (pthread_create(&t, NULL, blocked_thread, NULL) != 0) {
		return 1;
	}
	sem_wait(&started);
	printf("main=%p\n", (void *)main);
	printf("hidden_func=%p\n", (void *)hidden_func);
	printf("start_thread_ret=%p\n", thread_ret);
	printf("ready %d\n", hidden_func(1));
	fflush(stdout);
	while (getchar() != EOF) {
	}
	return 0;
}
