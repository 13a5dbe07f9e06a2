// JavaCompile.java: javac, the JDK's own compiler (code nobody here wrote:
// deep recursive descent, lambdas, interface calls, code compiled all the
// time), compiling a source file again and again (java JavaCompile.java
// SOURCE OUTDIR SECONDS).
import javax.tools.ToolProvider;

public class JavaCompile {
    public static void main(String[] args) {
        var javac = ToolProvider.getSystemJavaCompiler();
        long end = System.nanoTime() + Long.parseLong(args[2]) * 1_000_000_000L;
        while (System.nanoTime() < end) {
            javac.run(null, null, null, "-d", args[1], args[0]);
        }
    }
}
