// java -XX:CompileCommand=dontinline,JavaInline::burn JavaInline.java SECONDS:
// compiled burn <- step (inlined into loop) <- loop <- main, at known lines;
// prints "ready" as main begins.
public class JavaInline {
    static long burn(long x) {
        for (int i = 0; i < 1000; i++) {
            x = x * 31 + i;
        }
        return x;
    }

    static long step(long x) {
        return burn(x) + 1; // line 13: step_call
    }

    static long loop(long n) {
        long x = 0;
        for (long i = 0; i < n; i++) {
            x = step(x); // line 19: loop_call
        }
        return x;
    }

    public static void main(String[] args) {
        long end = System.nanoTime() + Long.parseLong(args[0]) * 1_000_000_000L;
        long sink = 0;
        while (System.nanoTime() < end) {
            sink += loop(100_000L); // line 28: main_call
        }
        System.out.println(sink);
    }

    static { // class initialization: main runs next (the source compiled, the class loaded)
        System.out.println("ready");
    }
}
