// JavaBurn.java: a JVM burning CPU in one Java method, run with no flag
// (java JavaBurn.java SECONDS): the sampled leaf is Spin.spin's compiled code.
public class JavaBurn {
    static long spin(long n) {
        long x = 0;
        for (long i = 0; i < n; i++) {
            x = x * 31 + i;
        }
        return x;
    }

    public static void main(String[] args) {
        long end = System.nanoTime() + Long.parseLong(args[0]) * 1_000_000_000L;
        long sink = 0;
        while (System.nanoTime() < end) {
            sink += spin(10_000_000L);
        }
        System.out.println(sink);
    }
}
