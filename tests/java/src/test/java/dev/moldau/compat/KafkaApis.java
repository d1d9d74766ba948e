package dev.moldau.compat;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.common.protocol.ApiKeys;

/**
 * The APIs a broker advertises, read with a raw ApiVersions v0 request (independent of the
 * client under test). Tests of features other engineers are still building (transactions,
 * KIP-848) run when the broker advertises their APIs and are reported as skipped until then.
 */
public final class KafkaApis {
    private KafkaApis() {}

    /** api key -> {min, max} as advertised by the broker at {@code bootstrap} (host:port). */
    public static Map<Short, short[]> advertised(String bootstrap) throws IOException {
        String[] hp = bootstrap.split(",")[0].split(":");
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(hp[0], Integer.parseInt(hp[1])), 5000);
            s.setSoTimeout(5000);
            DataOutputStream out = new DataOutputStream(s.getOutputStream());
            byte[] client = "moldau-java-compat".getBytes(StandardCharsets.UTF_8);
            out.writeInt(2 + 2 + 4 + 2 + client.length);
            out.writeShort(ApiKeys.API_VERSIONS.id);
            out.writeShort(0);
            out.writeInt(42);
            out.writeShort(client.length);
            out.write(client);
            out.flush();
            DataInputStream in = new DataInputStream(s.getInputStream());
            int size = in.readInt();
            if (size < 10 || size > 1 << 20) throw new IOException("bad ApiVersions frame size " + size);
            int corr = in.readInt();
            if (corr != 42) throw new IOException("correlation id " + corr);
            short error = in.readShort();
            if (error != 0) throw new IOException("ApiVersions error " + error);
            int n = in.readInt();
            Map<Short, short[]> apis = new TreeMap<>();
            for (int i = 0; i < n; i++) {
                short key = in.readShort();
                apis.put(key, new short[] {in.readShort(), in.readShort()});
            }
            return apis;
        }
    }

    public static boolean supports(String bootstrap, ApiKeys api) {
        try {
            return advertised(bootstrap).containsKey(api.id);
        } catch (IOException e) {
            throw new IllegalStateException("ApiVersions against " + bootstrap + " failed", e);
        }
    }

    /** Waits until ApiVersions succeeds (the broker serves requests). */
    static void waitServing(String bootstrap, long timeoutMs) throws IOException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        IOException last = null;
        while (System.currentTimeMillis() < deadline) {
            try {
                advertised(bootstrap);
                return;
            } catch (IOException e) {
                last = e;
            }
            try {
                Thread.sleep(50);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IOException("interrupted", e);
            }
        }
        throw new IOException("broker at " + bootstrap + " not serving within " + timeoutMs + " ms", last);
    }
}
