# The CPython workload of the bench's busy suite: it burns ~5 ms of CPU,
# then sleeps 45 ms, forever (the bench kills it).

import time


def burn(seconds):
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x


def main():
    while True:
        burn(0.005)
        time.sleep(0.045)


main()
