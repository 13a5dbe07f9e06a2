// JavaSleep.java SECONDS: a thread sleeping in a loop, off-CPU in Thread.sleep
// under nap <- main at known lines; prints "ready" as main begins.
public class JavaSleep {
    static void nap() throws InterruptedException {
        Thread.sleep(20); // line 5: nap_call
    }

    public static void main(String[] args) throws Exception {
        long end = System.nanoTime() + Long.parseLong(args[0]) * 1_000_000_000L;
        while (System.nanoTime() < end) {
            nap(); // line 11: main_call
        }
    }

    static { // class initialization: main runs next (the source compiled, the class loaded)
        System.out.println("ready");
    }
}
