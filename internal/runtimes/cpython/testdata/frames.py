# Test workload of internal/runtimes/cpython (CPython 3.9 to 3.13): prints one JSON line
# describing some of its code objects as the interpreter itself sees them,
# then blocks reading stdin, in wait(), until the test closes it.
import dis
import json
import sys
import threading


def module_function(n):
    total = 0
    for i in range(n):
        if i % 2:
            total += i
        else:
            total -= 1
    return total


class Outer:
    def method(self):
        def inner():
            return [x * x
                    for x in range(3)]
        return inner


def café():
    return "latin-1 name"


def 函数():
    return "UCS-2 name"


def 𐀀():
    return "UCS-4 name"


square = lambda x: x * x  # noqa: E731


def expected_lines(code):
    """[index, line] for every code unit of code, line None when it has none."""
    units = len(code.co_code) // 2
    lines = {}
    if sys.version_info >= (3, 10):
        for start, end, line in code.co_lines():
            for offset in range(start, end, 2):
                lines[offset // 2] = line
    else:
        starts = dict(dis.findlinestarts(code))
        line = None
        for index in range(units):
            line = starts.get(index * 2, line)
            lines[index] = line
    return [[i, lines.get(i)] for i in range(units)]


def describe(code):
    return {
        "addr": id(code),
        "name": code.co_name,
        "qualname": getattr(code, "co_qualname", code.co_name),
        "file": code.co_filename,
        "firstlineno": code.co_firstlineno,
        "units": len(code.co_code) // 2,
        "lines": expected_lines(code),
    }


def wait():
    sys.stdin.read()  # wait: blocked here


inner = Outer().method().__code__
codes = [sys._getframe().f_code, module_function.__code__, Outer.method.__code__, inner,
         café.__code__, 函数.__code__, 𐀀.__code__, square.__code__, wait.__code__]
print(json.dumps({"thread_id": threading.get_ident(), "codes": [describe(c) for c in codes]}), flush=True)
wait()  # module: blocked here
