// BusyLoop.java: the JVM workload of the busy suite, run with the source
// launcher (java BusyLoop.java). It burns ~5 ms of CPU, then sleeps 45 ms,
// forever (the bench kills it).
public class BusyLoop {
    static long burn(long nanos) {
        long end = System.nanoTime() + nanos;
        long x = 0;
        while (System.nanoTime() < end) {
            x = x * 31 + 7;
        }
        return x;
    }

    public static void main(String[] args) throws InterruptedException {
        long sink = 0;
        while (true) {
            sink += burn(5_000_000L);
            Thread.sleep(45);
            if (sink == 42) {
                System.out.println(sink);
            }
        }
    }
}
