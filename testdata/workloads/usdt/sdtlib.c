// sdtlib: the library sdtpair.c loads: sdtlib:start and sdtlib:done
// around a sleep, without semaphores.
// cflags: -shared -fPIC
#include <sys/sdt.h>

#include <time.h>

void lib_scope(int ms)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = ms * 1000000L };

	STAP_PROBE1(sdtlib, start, ms);
	nanosleep(&ts, NULL);
	STAP_PROBE1(sdtlib, done, ms);
}
