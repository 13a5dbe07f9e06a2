# A fixed amount of pure-Python work for the bench's python suite: fib(25)
# ITERATIONS times under py_work. Prints its wall time in ns on stdout and
# "pyfixed: cpu_ns N" on stderr, like the C workloads.
import sys
import time


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def py_work(iterations):
    total = 0
    for _ in range(iterations):
        total += fib(25)
    return total


def main():
    iterations = int(sys.argv[1])
    cpu0, wall0 = time.process_time_ns(), time.monotonic_ns()
    total = py_work(iterations)
    wall, cpu = time.monotonic_ns() - wall0, time.process_time_ns() - cpu0
    print("pyfixed: %d iterations, checksum %d" % (iterations, total), file=sys.stderr)
    print("pyfixed: cpu_ns %d" % cpu, file=sys.stderr)
    print(wall)


main()
