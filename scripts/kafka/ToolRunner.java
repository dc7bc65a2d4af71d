import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Base64;

/**
 * Runs Kafka's command-line classes one after another inside one JVM, so a test suite pays for one
 * JVM start instead of one per tool call (scripts/kafka_peer.py drives it).
 *
 * Request, one line on stdin: tab-separated base64 fields: main class, bytes for the tool's stdin,
 * then the arguments. Answer, one line on stdout: exit code, base64 stdout, base64 stderr.
 * Kafka's tools leave through Kafka's Exit class (org.apache.kafka.common.utils.Exit up to 4.3,
 * org.apache.kafka.common.utils.internals.Exit since 4.4, so it is found by name), which is redirected here: the first
 * call records the exit code and what the tool had printed so far (a real exit would end the process
 * there), then throws to unwind the tool; whatever a catch-all block in the tool prints after that
 * is dropped. A tool that returns normally exited with 0, one that throws exited with 1 after
 * printing the stack trace, as the JVM would.
 */
public final class ToolRunner {
    /** System.out and System.err stay the same objects for the JVM's life (Scala's Console and
     * tools keep a reference to the stream they first saw); each call swaps the buffer behind them. */
    private static final class Switch extends OutputStream {
        private volatile OutputStream target = OutputStream.nullOutputStream();

        @Override
        public void write(int b) throws IOException {
            target.write(b);
        }

        @Override
        public void write(byte[] b, int off, int len) throws IOException {
            target.write(b, off, len);
        }
    }

    private static final class ExitCalled extends RuntimeException {
        private static final long serialVersionUID = 1L;
        final int code;

        ExitCalled(int code) {
            super("exit " + code, null, false, false);
            this.code = code;
        }
    }

    private static ByteArrayOutputStream out;
    private static ByteArrayOutputStream err;
    private static Integer exitCode;
    private static byte[] outAtExit;
    private static byte[] errAtExit;

    private static synchronized void exit(int code) {
        if (exitCode == null) {
            exitCode = code;
            System.out.flush();
            System.err.flush();
            outAtExit = out.toByteArray();
            errAtExit = err.toByteArray();
        }
        throw new ExitCalled(code);
    }

    /** Kafka's Exit.setExitProcedure and setHaltProcedure, given a Procedure that calls exit(code). */
    private static void redirectKafkaExit() throws ReflectiveOperationException {
        Class<?> exitClass;
        try {
            exitClass = Class.forName("org.apache.kafka.common.utils.internals.Exit");
        } catch (ClassNotFoundException e) {
            exitClass = Class.forName("org.apache.kafka.common.utils.Exit");
        }
        Class<?> procedure = Class.forName(exitClass.getName() + "$Procedure");
        Object redirect = Proxy.newProxyInstance(procedure.getClassLoader(), new Class<?>[] {procedure},
                (proxy, method, args) -> switch (method.getName()) {
                    case "execute" -> {
                        exit((Integer) args[0]);
                        yield null;
                    }
                    case "hashCode" -> System.identityHashCode(proxy);
                    case "equals" -> proxy == args[0];
                    case "toString" -> "ToolRunner's exit procedure";
                    default -> null;
                });
        exitClass.getMethod("setExitProcedure", procedure).invoke(null, redirect);
        exitClass.getMethod("setHaltProcedure", procedure).invoke(null, redirect);
    }

    public static void main(String[] ignored) throws Exception {
        PrintStream protocol = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true,
                StandardCharsets.UTF_8);
        InputStream originalIn = System.in;
        BufferedReader requests = new BufferedReader(new InputStreamReader(originalIn, StandardCharsets.UTF_8));
        redirectKafkaExit();
        Switch outSwitch = new Switch();
        Switch errSwitch = new Switch();
        PrintStream outStream = new PrintStream(outSwitch, true, StandardCharsets.UTF_8);
        PrintStream errStream = new PrintStream(errSwitch, true, StandardCharsets.UTF_8);
        System.setOut(outStream);
        System.setErr(errStream);
        Base64.Decoder dec = Base64.getDecoder();
        Base64.Encoder enc = Base64.getEncoder();
        protocol.println("READY");
        String line;
        while ((line = requests.readLine()) != null) {
            String[] fields = line.split("\t", -1);
            String cls = new String(dec.decode(fields[0]), StandardCharsets.UTF_8);
            byte[] input = dec.decode(fields[1]);
            String[] args = Arrays.stream(fields, 2, fields.length)
                    .map(f -> new String(dec.decode(f), StandardCharsets.UTF_8)).toArray(String[]::new);
            outStream.flush();
            errStream.flush();
            synchronized (ToolRunner.class) {
                out = new ByteArrayOutputStream();
                err = new ByteArrayOutputStream();
                exitCode = null;
                outSwitch.target = out;
                errSwitch.target = err;
            }
            System.setIn(new ByteArrayInputStream(input));
            int code = 0;
            try {
                Method main = Class.forName(cls).getMethod("main", String[].class);
                main.invoke(null, (Object) args);
            } catch (InvocationTargetException e) {
                if (!(e.getCause() instanceof ExitCalled)) {
                    e.getCause().printStackTrace(errStream);
                    code = 1;
                }
            } catch (Throwable t) {
                t.printStackTrace(errStream);
                code = 1;
            }
            outStream.flush();
            errStream.flush();
            byte[] stdout;
            byte[] stderr;
            synchronized (ToolRunner.class) {
                if (exitCode != null) {
                    code = exitCode;
                    stdout = outAtExit;
                    stderr = errAtExit;
                } else {
                    stdout = out.toByteArray();
                    stderr = err.toByteArray();
                }
            }
            protocol.println(code + "\t" + enc.encodeToString(stdout) + "\t" + enc.encodeToString(stderr));
        }
    }
}
