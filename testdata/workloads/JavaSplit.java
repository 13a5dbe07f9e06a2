// JavaSplit.java: two Java threads taking turns burning CPU 3:1, thread a
// in workA, thread b in workB (java JavaSplit.java SECONDS); prints "ready"
// as main begins.
import java.util.concurrent.Semaphore;

public class JavaSplit {
    static final long N = 1_000_000L;
    static final Semaphore turnA = new Semaphore(1), turnB = new Semaphore(0);
    static volatile long sink;

    static long workA(long n) {
        long x = 0;
        for (long i = 0; i < 3 * n; i++) {
            x = x * 31 + i;
        }
        return x;
    }

    static long workB(long n) {
        long x = 0;
        for (long i = 0; i < n; i++) {
            x = x * 31 + i;
        }
        return x;
    }

    public static void main(String[] args) throws Exception {
        long end = System.nanoTime() + Long.parseLong(args[0]) * 1_000_000_000L;
        Thread a = new Thread(() -> {
            try {
                while (System.nanoTime() < end) {
                    turnA.acquire();
                    sink += workA(N);
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
                    sink += workB(N);
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
