package dev.moldau.compat;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * One real {@code moldau server} child process on a free loopback port (it binds port 0 and
 * prints the bound address on its first stdout line). Its stderr and the rest of its stdout go
 * to a log file whose tail is attached to failures. {@link #stop()} sends SIGTERM and fails
 * unless the broker exits 0, so an unclean shutdown is a test failure.
 */
public final class MoldauBroker implements AutoCloseable {
    private static final Pattern LISTEN =
            Pattern.compile("^moldau: listening on 127\\.0\\.0\\.1:(\\d+), data in (.+)$");

    private final Path binary;
    private final Path dataDir;
    private final Path logFile;
    private final Map<String, String> settings;
    private Process proc;
    private int port;

    private MoldauBroker(Path binary, Path dataDir, Map<String, String> settings) {
        this.binary = binary;
        this.dataDir = dataDir;
        this.logFile = dataDir.resolveSibling(dataDir.getFileName() + ".log");
        this.settings = settings;
    }

    /** The binary from -Dmoldau.bin or $MOLDAU_BIN (scripts/test sets it). */
    public static Path binary() {
        String bin = System.getProperty("moldau.bin");
        if (bin == null || bin.isEmpty()) bin = System.getenv("MOLDAU_BIN");
        if (bin == null || bin.isEmpty()) {
            throw new IllegalStateException("set MOLDAU_BIN (or -Dmoldau.bin) to the moldau binary");
        }
        Path p = Path.of(bin);
        if (!Files.isExecutable(p)) throw new IllegalStateException("moldau binary not executable: " + p);
        return p;
    }

    /** Starts a broker with its own temporary data directory and the given broker settings. */
    public static MoldauBroker start(Map<String, String> settings) throws IOException {
        Path base = Files.createTempDirectory("moldau-java-");
        MoldauBroker b = new MoldauBroker(binary(), base.resolve("data"), settings);
        b.start();
        return b;
    }

    public synchronized void start() throws IOException {
        if (proc != null && proc.isAlive()) throw new IllegalStateException("broker already running");
        Files.createDirectories(dataDir);
        List<String> args = new ArrayList<>(List.of(binary.toString(), "server", "--listen", "127.0.0.1:0",
                "--data-dir", dataDir.toString()));
        settings.forEach((k, v) -> {
            args.add("--set");
            args.add(k + "=" + v);
        });
        OutputStream log = Files.newOutputStream(logFile, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        log.write(("\n=== start: " + String.join(" ", args) + "\n").getBytes(StandardCharsets.UTF_8));
        log.flush();
        ProcessBuilder pb = new ProcessBuilder(args)
                .redirectInput(ProcessBuilder.Redirect.from(Path.of("/dev/null").toFile()))
                .redirectError(ProcessBuilder.Redirect.appendTo(logFile.toFile()));
        pb.environment().putIfAbsent("RUST_BACKTRACE", "1");
        log.close();
        proc = pb.start();
        // A test JVM that dies (or is killed) must not leave its broker running.
        Process started = proc;
        Runtime.getRuntime().addShutdownHook(new Thread(started::destroyForcibly, "moldau-reaper-" + started.pid()));
        BufferedReader out = new BufferedReader(new InputStreamReader(proc.getInputStream(), StandardCharsets.UTF_8));
        String first = out.readLine();
        Matcher m = first == null ? null : LISTEN.matcher(first);
        if (m == null || !m.matches()) {
            proc.destroyForcibly();
            throw new IOException("unexpected first stdout line from moldau: " + first + "\n" + logTail());
        }
        port = Integer.parseInt(m.group(1));
        // Drain the rest of stdout so a chatty broker can never block on a full pipe.
        Process p = proc;
        Thread drain = new Thread(() -> {
            try (OutputStream o = Files.newOutputStream(logFile, StandardOpenOption.APPEND)) {
                String line;
                while ((line = out.readLine()) != null) {
                    o.write(("[stdout] " + line + "\n").getBytes(StandardCharsets.UTF_8));
                    o.flush();
                }
            } catch (IOException ignored) {
                // the broker exited
            }
        }, "moldau-stdout-" + p.pid());
        drain.setDaemon(true);
        drain.start();
        KafkaApis.waitServing(bootstrap(), 30_000);
    }

    public String bootstrap() {
        return "127.0.0.1:" + port;
    }

    public boolean alive() {
        return proc != null && proc.isAlive();
    }

    /** SIGTERM, wait, and fail unless the broker exits 0 within 30 s. */
    public synchronized void stop() throws InterruptedException {
        if (proc == null) return;
        Process p = proc;
        proc = null;
        if (!p.isAlive()) {
            throw new AssertionError("moldau died during the test (exit " + p.exitValue() + ")\n" + logTail());
        }
        p.destroy();
        if (!p.waitFor(30, TimeUnit.SECONDS)) {
            p.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            throw new AssertionError("moldau did not exit within 30 s of SIGTERM\n" + logTail());
        }
        if (p.exitValue() != 0) {
            throw new AssertionError("moldau exited " + p.exitValue() + " after SIGTERM (expected 0)\n" + logTail());
        }
    }

    /**
     * Stops the broker and, once it exited cleanly, deletes its temporary directory (data and
     * log); after a failure the directory stays for the report.
     */
    @Override
    public void close() throws InterruptedException {
        stop();
        deleteTree(dataDir.getParent());
    }

    private static void deleteTree(Path root) {
        if (root == null || !Files.exists(root)) return;
        try (var paths = Files.walk(root)) {
            paths.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException ignored) {
            // best effort: a leftover temporary directory is not a test failure
        }
    }

    public String logTail() {
        try {
            byte[] all = Files.readAllBytes(logFile);
            int from = Math.max(0, all.length - 6000);
            return new String(all, from, all.length - from, StandardCharsets.UTF_8);
        } catch (IOException e) {
            return "<no log: " + e + ">";
        }
    }
}
