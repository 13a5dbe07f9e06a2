// Spin.java: a JVM that stays up, burning a little CPU: the tests read its
// tables and walk its frames.
public class Spin {
    static long spin(long n) {
        long x = 0;
        for (long i = 0; i < n; i++) {
            x = x * 31 + i;
        }
        return x;
    }

    public static void main(String[] args) throws Exception {
        long sink = 0;
        while (true) {
            sink += spin(1_000_000L);
            Thread.sleep(20);
            if (sink == 42) {
                System.out.println(sink);
            }
        }
    }
}
