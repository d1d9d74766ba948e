package dev.moldau.compat;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.TestInstance;

/**
 * A real {@code moldau server} shared by the tests of one class, plus client factories with
 * bounded timeouts (a hang must fail a test, not stall the stage).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
public abstract class BrokerTestBase {
    protected MoldauBroker broker;
    protected Admin admin;

    /** Broker settings for this class (Kafka property names); override to change. */
    protected Map<String, String> brokerSettings() {
        Map<String, String> s = new HashMap<>();
        // As in Kafka's own config/server.properties for development: no initial join delay.
        s.put("group.initial.rebalance.delay.ms", "0");
        return s;
    }

    /**
     * -Dcompat.bootstrap=HOST:PORT runs the tests against an already running broker instead of a
     * Moldau they start, e.g. Apache Kafka from scripts/reference/kafka, to check what Kafka
     * itself does where a test and Moldau disagree.
     */
    protected static final String EXTERNAL = System.getProperty("compat.bootstrap", "");

    @BeforeAll
    void startBroker() throws Exception {
        if (EXTERNAL.isEmpty()) broker = MoldauBroker.start(brokerSettings());
        admin = admin();
    }

    @AfterAll
    void stopBroker() throws Exception {
        if (admin != null) admin.close(Duration.ofSeconds(10));
        if (broker != null) broker.close();
    }

    protected String bootstrap() {
        return EXTERNAL.isEmpty() ? broker.bootstrap() : EXTERNAL;
    }

    protected static String unique(TestInfo info) {
        String base = info.getTestMethod().map(m -> m.getName()).orElse("t").replaceAll("[^A-Za-z0-9]", "-");
        return base + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    protected Admin admin() {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap());
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 15000);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30000);
        return Admin.create(p);
    }

    protected KafkaProducer<String, String> producer(Map<String, Object> overrides) {
        Map<String, Object> p = new HashMap<>();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap());
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 30000);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 30000);
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 15000);
        p.putAll(overrides);
        return new KafkaProducer<>(p);
    }

    protected KafkaProducer<byte[], byte[]> bytesProducer(Map<String, Object> overrides) {
        Map<String, Object> p = new HashMap<>();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap());
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 30000);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 30000);
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 15000);
        p.putAll(overrides);
        return new KafkaProducer<>(p);
    }

    protected KafkaConsumer<String, String> consumer(Map<String, Object> overrides) {
        Map<String, Object> p = new HashMap<>();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap());
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, 15000);
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30000);
        p.putAll(overrides);
        return new KafkaConsumer<>(p);
    }

    protected KafkaConsumer<byte[], byte[]> bytesConsumer(Map<String, Object> overrides) {
        Map<String, Object> p = new HashMap<>();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap());
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, 15000);
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30000);
        p.putAll(overrides);
        return new KafkaConsumer<>(p);
    }

    protected void createTopic(String name, int partitions, Map<String, String> configs) throws Exception {
        admin.createTopics(List.of(new NewTopic(name, partitions, (short) 1).configs(configs)))
                .all().get(30, TimeUnit.SECONDS);
    }

    /** Polls until {@code count} records arrived (or fails after {@code timeout}). */
    protected static <K, V> List<ConsumerRecord<K, V>> pollCount(KafkaConsumer<K, V> c, int count, Duration timeout) {
        List<ConsumerRecord<K, V>> out = new ArrayList<>();
        long deadline = System.nanoTime() + timeout.toNanos();
        while (out.size() < count && System.nanoTime() < deadline) {
            c.poll(Duration.ofMillis(200)).forEach(out::add);
        }
        assertTrue(out.size() >= count, "got " + out.size() + " of " + count + " records within " + timeout);
        return out;
    }

    /** Waits for a condition with a deadline (no fixed sleeps as synchronisation). */
    protected static void waitFor(String what, Duration timeout, BooleanSupplier cond) throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (!cond.getAsBoolean()) {
            if (System.nanoTime() > deadline) throw new AssertionError("timed out waiting for " + what);
            Thread.sleep(50);
        }
    }
}
