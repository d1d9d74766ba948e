package dev.moldau.compat;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidTopicException;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.utils.Utils;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The Java producer (kafka-clients 4.4) against Moldau. */
class ProducerTest extends BrokerTestBase {

    /** Idempotent, acks=all, every codec: keys, values, headers, timestamps and offsets round-trip. */
    @ParameterizedTest
    @ValueSource(strings = {"none", "gzip", "snappy", "lz4", "zstd"})
    void idempotentProducerEveryCodec(String codec, TestInfo info) throws Exception {
        String topic = unique(info) + "-" + codec;
        createTopic(topic, 1, Map.of());
        int n = 500;
        long ts0 = 1_700_000_000_000L;
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> p = bytesProducer(Map.of(
                ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true,
                ProducerConfig.ACKS_CONFIG, "all",
                ProducerConfig.COMPRESSION_TYPE_CONFIG, codec,
                ProducerConfig.LINGER_MS_CONFIG, 20,
                ProducerConfig.BATCH_SIZE_CONFIG, 16384))) {
            for (int i = 0; i < n; i++) {
                List<Header> headers = List.of(new RecordHeader("i", Integer.toString(i).getBytes(StandardCharsets.UTF_8)),
                        new RecordHeader("empty", new byte[0]), new RecordHeader("null", null));
                byte[] key = i % 7 == 0 ? null : ("key-" + i).getBytes(StandardCharsets.UTF_8);
                byte[] value = i % 11 == 0 ? null : ("value-" + i + "-" + "x".repeat(i % 100)).getBytes(StandardCharsets.UTF_8);
                sent.add(p.send(new ProducerRecord<>(topic, 0, ts0 + i, key, value, headers)));
            }
            p.flush();
            for (int i = 0; i < n; i++) {
                RecordMetadata md = sent.get(i).get(30, TimeUnit.SECONDS);
                assertEquals(i, md.offset(), "offsets are assigned in send order");
                assertEquals(ts0 + i, md.timestamp());
            }
        }
        try (KafkaConsumer<byte[], byte[]> c = bytesConsumer(Map.of())) {
            c.assign(List.of(new TopicPartition(topic, 0)));
            c.seekToBeginning(List.of(new TopicPartition(topic, 0)));
            List<ConsumerRecord<byte[], byte[]>> got = pollCount(c, n, Duration.ofSeconds(60));
            assertEquals(n, got.size());
            for (int i = 0; i < n; i++) {
                ConsumerRecord<byte[], byte[]> r = got.get(i);
                assertEquals(i, r.offset());
                assertEquals(ts0 + i, r.timestamp());
                assertEquals(TimestampType.CREATE_TIME, r.timestampType());
                byte[] key = i % 7 == 0 ? null : ("key-" + i).getBytes(StandardCharsets.UTF_8);
                byte[] value = i % 11 == 0 ? null : ("value-" + i + "-" + "x".repeat(i % 100)).getBytes(StandardCharsets.UTF_8);
                assertArrayEquals(key, r.key());
                assertArrayEquals(value, r.value());
                Header[] hs = r.headers().toArray();
                assertEquals(3, hs.length);
                assertEquals("i", hs[0].key());
                assertEquals(Integer.toString(i), new String(hs[0].value(), StandardCharsets.UTF_8));
                assertEquals("empty", hs[1].key());
                assertArrayEquals(new byte[0], hs[1].value());
                assertEquals("null", hs[2].key());
                assertEquals(null, hs[2].value());
            }
        }
    }

    /** Keyed records land where Kafka's default partitioner (murmur2) puts them, and stay there. */
    @Test
    void keyedPlacementMatchesKafkasPartitioner(TestInfo info) throws Exception {
        String topic = unique(info);
        int partitions = 7;
        createTopic(topic, partitions, Map.of());
        int n = 300;
        Map<Integer, List<String>> expected = new HashMap<>();
        try (KafkaProducer<String, String> p = producer(Map.of(ProducerConfig.ACKS_CONFIG, "1"))) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                String key = "user-" + i;
                sent.add(p.send(new ProducerRecord<>(topic, key, "v" + i)));
                int want = Utils.toPositive(Utils.murmur2(key.getBytes(StandardCharsets.UTF_8))) % partitions;
                expected.computeIfAbsent(want, k -> new ArrayList<>()).add(key);
            }
            p.flush();
            for (int i = 0; i < n; i++) {
                int want = Utils.toPositive(Utils.murmur2(("user-" + i).getBytes(StandardCharsets.UTF_8))) % partitions;
                assertEquals(want, sent.get(i).get(30, TimeUnit.SECONDS).partition(), "partition of user-" + i);
            }
        }
        try (KafkaConsumer<String, String> c = consumer(Map.of())) {
            for (int part = 0; part < partitions; part++) {
                TopicPartition tp = new TopicPartition(topic, part);
                c.assign(List.of(tp));
                c.seekToBeginning(List.of(tp));
                List<String> want = expected.getOrDefault(part, List.of());
                long end = c.endOffsets(List.of(tp)).get(tp);
                assertEquals(want.size(), end, "records in partition " + part);
                List<String> keys = new ArrayList<>();
                if (!want.isEmpty()) pollCount(c, want.size(), Duration.ofSeconds(30)).forEach(r -> keys.add(r.key()));
                assertEquals(want, keys, "keys of partition " + part + " in send order");
            }
        }
    }

    /** Keyless records spread over partitions (sticky partitioner) and every one is delivered. */
    @Test
    void keylessRecordsSpreadAndArrive(TestInfo info) throws Exception {
        String topic = unique(info);
        createTopic(topic, 3, Map.of());
        int n = 3000;
        try (KafkaProducer<String, String> p = producer(Map.of(ProducerConfig.BATCH_SIZE_CONFIG, 1024,
                ProducerConfig.LINGER_MS_CONFIG, 0))) {
            for (int i = 0; i < n; i++) p.send(new ProducerRecord<>(topic, null, "value-" + i + "-" + "y".repeat(40)));
            p.flush();
        }
        Map<TopicPartition, Long> ends;
        try (KafkaConsumer<String, String> c = consumer(Map.of())) {
            List<TopicPartition> tps = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1),
                    new TopicPartition(topic, 2));
            ends = c.endOffsets(tps);
            assertEquals(n, ends.values().stream().mapToLong(Long::longValue).sum());
            long used = ends.values().stream().filter(v -> v > 0).count();
            assertTrue(used >= 2, "sticky partitioner switched partitions: " + ends);
        }
    }

    /** A LogAppendTime topic: the broker's time comes back in the produce response and the fetch. */
    @Test
    void logAppendTime(TestInfo info) throws Exception {
        String topic = unique(info);
        createTopic(topic, 1, Map.of("message.timestamp.type", "LogAppendTime"));
        long before = System.currentTimeMillis();
        RecordMetadata md;
        try (KafkaProducer<String, String> p = producer(Map.of())) {
            md = p.send(new ProducerRecord<>(topic, 0, 1L, "k", "v")).get(30, TimeUnit.SECONDS);
        }
        long after = System.currentTimeMillis();
        assertTrue(md.timestamp() >= before - 1000 && md.timestamp() <= after + 1000, "append time " + md.timestamp());
        try (KafkaConsumer<String, String> c = consumer(Map.of())) {
            c.assign(List.of(new TopicPartition(topic, 0)));
            ConsumerRecord<String, String> r = pollCount(c, 1, Duration.ofSeconds(30)).get(0);
            assertEquals(TimestampType.LOG_APPEND_TIME, r.timestampType());
            assertEquals(md.timestamp(), r.timestamp());
        }
    }

    /** acks=0 and acks=1 deliver too (acks=0 gets no response; the records still land). */
    @Test
    void acksZeroAndOne(TestInfo info) throws Exception {
        String topic = unique(info);
        createTopic(topic, 1, Map.of());
        for (String acks : List.of("0", "1")) {
            try (KafkaProducer<String, String> p = producer(Map.of(ProducerConfig.ACKS_CONFIG, acks,
                    ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, false))) {
                for (int i = 0; i < 50; i++) p.send(new ProducerRecord<>(topic, 0, null, "acks" + acks + "-" + i));
                p.flush();
            }
        }
        try (KafkaConsumer<String, String> c = consumer(Map.of())) {
            TopicPartition tp = new TopicPartition(topic, 0);
            waitFor("100 records", Duration.ofSeconds(30), () -> c.endOffsets(List.of(tp)).get(tp) == 100L);
        }
    }

    /** A record above the topic's max.message.bytes gets MESSAGE_TOO_LARGE from the broker. */
    @Test
    void recordTooLargeForTopic(TestInfo info) throws Exception {
        String topic = unique(info);
        createTopic(topic, 1, Map.of("max.message.bytes", "2000"));
        try (KafkaProducer<String, String> p = producer(Map.of(ProducerConfig.COMPRESSION_TYPE_CONFIG, "none"))) {
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> p.send(new ProducerRecord<>(topic, 0, null, "z".repeat(5000))).get(30, TimeUnit.SECONDS));
            assertInstanceOf(RecordTooLargeException.class, e.getCause());
            // The producer is still usable for records that fit.
            assertNotNull(p.send(new ProducerRecord<>(topic, 0, null, "small")).get(30, TimeUnit.SECONDS));
        }
    }

    /** Clients cannot write to internal topics. */
    @Test
    void produceToInternalTopicRefused() throws Exception {
        // Make sure __consumer_offsets exists (the first FindCoordinator creates it).
        try (KafkaConsumer<String, String> c = consumer(Map.of("group.id", "make-offsets-topic"))) {
            c.listTopics(Duration.ofSeconds(10));
            c.committed(java.util.Set.of(new TopicPartition("whatever", 0)), Duration.ofSeconds(30));
        }
        try (KafkaProducer<String, String> p = producer(Map.of(ProducerConfig.MAX_BLOCK_MS_CONFIG, 10000))) {
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> p.send(new ProducerRecord<>("__consumer_offsets", 0, null, "x")).get(30, TimeUnit.SECONDS));
            assertInstanceOf(InvalidTopicException.class, e.getCause(), String.valueOf(e.getCause()));
        }
    }
}
