// A fixed amount of Java work for the bench's java suite: ITERATIONS calls
// of work, each burning through an inlined step into a compiled burn, under
// java_work. Prints its wall time in ns on stdout and "javafixed: cpu_ns N"
// on stderr, like the other workloads.
import java.lang.management.ManagementFactory;

public class JavaFixed {
    static long burn(long x) {
        for (int i = 0; i < 1000; i++) {
            x = x * 31 + i;
        }
        return x;
    }

    static long step(long x) {
        return burn(x) + 1;
    }

    static long work(long n) {
        long x = 0;
        for (long i = 0; i < n; i++) {
            x = step(x);
        }
        return x;
    }

    static long java_work(long iterations) {
        long sink = 0;
        for (long i = 0; i < iterations; i++) {
            sink += work(10_000L);
        }
        return sink;
    }

    public static void main(String[] args) {
        long iterations = Long.parseLong(args[0]);
        var mx = ManagementFactory.getThreadMXBean();
        long cpu0 = mx.getCurrentThreadCpuTime(), wall0 = System.nanoTime();
        long sink = java_work(iterations);
        long wall = System.nanoTime() - wall0, cpu = mx.getCurrentThreadCpuTime() - cpu0;
        System.err.println("javafixed: " + iterations + " iterations, checksum " + sink);
        System.err.println("javafixed: cpu_ns " + cpu);
        System.out.println(wall);
    }
}
