# gdbsample.py, sourced by gdb -batch -p PID (jit_linux_test.go): NS times, stops
# the process with SIGUSR2 (never delivered), finds the innermost frame whose pc is
# in [JLO, JHI) (the JIT buffer; gdb unwinds helpers through their CFI) and prints
# its pc, rsp, rbp and the 320 bytes from rsp, as hex words.
import gdb, os
pid = gdb.selected_inferior().pid
lo = int(os.environ["JLO"], 16); hi = int(os.environ["JHI"], 16); n = int(os.environ["NS"])
gdb.execute("handle SIGUSR2 stop print nopass", to_string=True)
for i in range(n):
    gdb.execute("shell (sleep 0.03; kill -s USR2 %d) &" % pid, to_string=True)
    gdb.execute("continue", to_string=True)
    f = gdb.newest_frame(); depth = 0
    leaf = f.pc()
    while f is not None and not (lo <= f.pc() < hi) and depth < 8:
        try: f = f.older()
        except gdb.error: f = None
        depth += 1
    if f is None or depth >= 8:
        print("S leaf=%x nojit" % leaf); continue
    sp = int(f.read_register("rsp")) & (2**64-1)
    bp = int(f.read_register("rbp")) & (2**64-1)
    words = gdb.selected_inferior().read_memory(sp, 320).tobytes()
    ws = " ".join("%x" % int.from_bytes(words[j:j+8], "little") for j in range(0, 320, 8))
    print("S leaf=%x depth=%d pc=%x sp=%x bp=%x W %s" % (leaf, depth, f.pc(), sp, bp, ws))
