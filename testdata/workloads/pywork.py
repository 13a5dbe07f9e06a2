# A Python workload with known answers for the Python unwinder's tests.
# Usage: python pywork.py MODE SECONDS; prints "ready" once running.
# Modes:
#   fib    the main thread recurses in fib under work under <module>
#   pool   the same, with 200 idle threads started first (CPython lists
#          threads newest first: the main thread is the 201st)
#   split  two threads take turns burning CPU 3:1, in hot_loop and cold_loop
#   threads four threads recurse in fib under work under worker at once (in
#          parallel in a free-threaded build, each on its own copy of the
#          bytecode)
#   asyncio the main thread runs an event loop whose task recurses in fib
#          under the coroutines compute under serve
#   zlib   the main thread compresses in compress_block (zlib's C code)
#   sleep  the main thread sleeps in nap, 5 ms at a time
# Lines marked "# line:NAME" are the lines the tests expect.
import sys
import threading
import time
import zlib


def fib(n):
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)  # line:fib_recurse


def work(deadline):
    while time.time() < deadline:
        fib(18)  # line:work_call


class Burner:
    """Two threads take turns burning CPU: 3 ms in hot_loop, 1 ms in cold_loop."""

    def __init__(self):
        self.hot_turn = threading.Semaphore(1)
        self.cold_turn = threading.Semaphore(0)

    def hot_loop(self, deadline):
        while time.time() < deadline:
            self.hot_turn.acquire()
            spin_for(0.003)  # line:hot_call
            self.cold_turn.release()
        self.cold_turn.release()

    def cold_loop(self, deadline):
        while time.time() < deadline:
            self.cold_turn.acquire()
            spin_for(0.001)  # line:cold_call
            self.hot_turn.release()
        self.hot_turn.release()


def spin_for(seconds):
    end = time.perf_counter() + seconds
    total = 0
    while time.perf_counter() < end:
        total += 1
    return total


def compress_block(deadline):
    data = bytes(range(256)) * 4096
    while time.time() < deadline:
        zlib.compress(data, 9)  # line:zlib_call


def nap(deadline):
    while time.time() < deadline:
        time.sleep(0.005)  # line:nap_call


def worker(deadline):
    work(deadline)  # line:worker_call


async def compute(deadline):
    import asyncio  # here: the kernel matrix copies Debian 3.11 without it

    while time.time() < deadline:
        fib(22)  # line:compute_call
        await asyncio.sleep(0)


async def serve(deadline):
    await compute(deadline)  # line:serve_await


def idle_threads(n):
    stop = threading.Event()
    for i in range(n):
        threading.Thread(target=stop.wait, daemon=True, name="idle%d" % i).start()
    return stop


def main():
    mode, seconds = sys.argv[1], float(sys.argv[2])
    deadline = time.time() + seconds
    print("ready", flush=True)
    if mode in ("fib", "pool"):
        if mode == "pool":
            idle_threads(200)
        work(deadline)  # line:module_call
    elif mode == "split":
        b = Burner()
        hot = threading.Thread(target=b.hot_loop, args=(deadline,), name="hot")
        cold = threading.Thread(target=b.cold_loop, args=(deadline,), name="cold")
        hot.start()
        cold.start()
        hot.join()
        cold.join()
    elif mode == "threads":
        workers = [threading.Thread(target=worker, args=(deadline,), name="worker%d" % i) for i in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    elif mode == "asyncio":
        import asyncio

        asyncio.run(serve(deadline))
    elif mode == "zlib":
        compress_block(deadline)  # line:main_zlib
    elif mode == "sleep":
        nap(deadline)  # line:main_nap
    else:
        sys.exit("unknown mode " + mode)


main()  # line:module_main
