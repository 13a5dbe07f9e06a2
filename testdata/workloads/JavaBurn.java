// JavaBurn.java SECONDS: a JVM burning CPU in one method, run with no flag; the
// sampled leaf is spin's compiled code; prints "ready" as main begins.
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

    static { // class initialization: main runs next (the source compiled, the class loaded)
        System.out.println("ready");
    }
}
