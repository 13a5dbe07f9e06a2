// JavaSplit.java: two Java threads taking turns burning CPU 3:1, thread a
// in workA, thread b in workB (java JavaSplit.java SECONDS); prints "ready"
// as main begins. Each turn burns a share of the thread's own CPU time, not a
// count of iterations, so the split holds whichever tier compiled each method
// and however busy the machine is.
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.concurrent.Semaphore;

public class JavaSplit {
    static final long SLICE_NANOS = 1_000_000L;
    static final ThreadMXBean CPU = ManagementFactory.getThreadMXBean();
    static final Semaphore turnA = new Semaphore(1), turnB = new Semaphore(0);
    static volatile long sink;

    static long workA() {
        long until = CPU.getCurrentThreadCpuTime() + 3 * SLICE_NANOS, x = 0;
        while (CPU.getCurrentThreadCpuTime() < until) {
            for (long i = 0; i < 20_000; i++) {
                x = x * 31 + i;
            }
        }
        return x;
    }

    static long workB() {
        long until = CPU.getCurrentThreadCpuTime() + SLICE_NANOS, x = 0;
        while (CPU.getCurrentThreadCpuTime() < until) {
            for (long i = 0; i < 20_000; i++) {
                x = x * 31 + i;
            }
        }
        return x;
    }

    public static void main(String[] args) throws Exception {
        long end = System.nanoTime() + Long.parseLong(args[0]) * 1_000_000_000L;
        Thread a = new Thread(() -> {
            try {
                while (System.nanoTime() < end) {
                    turnA.acquire();
                    sink += workA();
                    turnB.release();
                }
            } catch (InterruptedException e) {
                return;
            } finally {
                turnB.release();
            }
        }, "a");
        Thread b = new Thread(() -> {
            try {
                while (System.nanoTime() < end) {
                    turnB.acquire();
                    sink += workB();
                    turnA.release();
                }
            } catch (InterruptedException e) {
                return;
            } finally {
                turnA.release();
            }
        }, "b");
        a.start();
        b.start();
        a.join();
        b.join();
    }

    static { // class initialization: main runs next (the source compiled, the class loaded)
        System.out.println("ready");
    }
}
