# gdbsample.py, sourced by gdb -batch attached to a PHP process (jit_linux_test.go,
# emulated_linux_test.go). Environment: NS, the number of stops; QPID, the process
# to signal (default: the inferior's pid; under qemu's gdbstub, qemu's); SPREG and
# FPREG, the stack and frame pointer registers (default rsp, rbp); JLO and JHI, the
# JIT buffer (hex), or WARMUP seconds to let it run first and the JIT buffer read
# from /proc/QPID/maps then (the /dev/zero segment's mapping past offset 0).
# Each stop is a SIGUSR2 (never delivered): the innermost frame whose pc is in the
# JIT buffer (gdb unwinds native code under it through its CFI) is printed as
# "S leaf= depth= pc= sp= bp= W" and the 320 bytes from sp, as hex words, or
# "S leaf= nojit".
import gdb, os
env = os.environ
pid = int(env.get("QPID") or gdb.selected_inferior().pid)
spreg, fpreg = env.get("SPREG", "rsp"), env.get("FPREG", "rbp")
n = int(env["NS"])
gdb.execute("handle SIGUSR2 stop print nopass", to_string=True)

def stop(delay):
    gdb.execute("shell (sleep %s; kill -s USR2 %d) &" % (delay, pid), to_string=True)
    gdb.execute("continue", to_string=True)

if "JLO" in env:
    lo, hi = int(env["JLO"], 16), int(env["JHI"], 16)
else:
    stop(env["WARMUP"])
    lo = hi = 0
    for l in open("/proc/%d/maps" % pid):
        f = l.split()
        if l.rstrip().endswith("/dev/zero (deleted)") and f[2] != "00000000":
            lo, hi = (int(x, 16) for x in f[0].split("-"))
    print("J %x %x" % (lo, hi))
for i in range(n):
    stop("0.05")
    f = gdb.newest_frame(); depth = 0
    leaf = f.pc()
    while f is not None and not (lo <= f.pc() < hi) and depth < 16:
        try: f = f.older()
        except gdb.error: f = None
        depth += 1
    if f is None or depth >= 16:
        print("S leaf=%x nojit" % leaf); continue
    sp = int(f.read_register(spreg)) & (2**64-1)
    bp = int(f.read_register(fpreg)) & (2**64-1)
    words = gdb.selected_inferior().read_memory(sp, 320).tobytes()
    ws = " ".join("%x" % int.from_bytes(words[j:j+8], "little") for j in range(0, 320, 8))
    print("S leaf=%x depth=%d pc=%x sp=%x bp=%x W %s" % (leaf, depth, f.pc(), sp, bp, ws))
