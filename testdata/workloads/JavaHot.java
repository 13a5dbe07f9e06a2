// JavaHot.java SECONDS: spin <- work <- main on the main thread, run with no
// flag (the JIT compiles and may inline spin into work, work is compiled
// on stack); prints "ready" as main begins.
public class JavaHot {
    static double spin(int n) {
        double x = 1;
        for (int i = 0; i < n; i++) {
            x = Math.sqrt(x * 1.000001 + i) * 0.5;
        }
        return x;
    }

    static double work(int rounds) {
        double t = 0;
        for (int r = 0; r < rounds; r++) {
            t += spin(200_000);
        }
        return t;
    }

    public static void main(String[] args) {
        long end = System.nanoTime() + Long.parseLong(args[0]) * 1_000_000_000L;
        double sink = 0;
        while (System.nanoTime() < end) {
            sink += work(20);
        }
        System.out.println(sink);
    }

    static { // class initialization: main runs next (the source compiled, the class loaded)
        System.out.println("ready");
    }
}
