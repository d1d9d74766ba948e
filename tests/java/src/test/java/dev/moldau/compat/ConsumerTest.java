package dev.moldau.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;

/** The Java consumer (classic group protocol) against Moldau. */
class ConsumerTest extends BrokerTestBase {

    private void produce(String topic, int partitions, int perPartition, long ts0) throws Exception {
        try (KafkaProducer<String, String> p = producer(Map.of())) {
            for (int part = 0; part < partitions; part++) {
                for (int i = 0; i < perPartition; i++) {
                    p.send(new ProducerRecord<>(topic, part, ts0 + i * 1000L, "k" + i, "p" + part + "-" + i));
                }
            }
            p.flush();
        }
    }

    @Test
    void assignSeekAndOffsetsByTime(TestInfo info) throws Exception {
        String topic = unique(info);
        createTopic(topic, 2, Map.of());
        long ts0 = 1_700_000_000_000L;
        produce(topic, 2, 100, ts0);
        TopicPartition tp0 = new TopicPartition(topic, 0);
        TopicPartition tp1 = new TopicPartition(topic, 1);
        try (KafkaConsumer<String, String> c = consumer(Map.of())) {
            assertEquals(Map.of(tp0, 0L, tp1, 0L), c.beginningOffsets(List.of(tp0, tp1)));
            assertEquals(Map.of(tp0, 100L, tp1, 100L), c.endOffsets(List.of(tp0, tp1)));
            assertEquals(2, c.partitionsFor(topic).size());

            c.assign(List.of(tp0));
            c.seek(tp0, 42);
            ConsumerRecord<String, String> r = pollCount(c, 1, Duration.ofSeconds(30)).get(0);
            assertEquals(42, r.offset());
            assertEquals("p0-42", r.value());

            c.seekToEnd(List.of(tp0));
            assertEquals(100, c.position(tp0));
            c.seekToBeginning(List.of(tp0));
            assertEquals(0, c.position(tp0));

            // Offsets by time: the first record at or after the timestamp.
            Map<TopicPartition, OffsetAndTimestamp> byTime = c.offsetsForTimes(Map.of(tp0, ts0 + 10_500L, tp1, ts0));
            assertEquals(11, byTime.get(tp0).offset());
            assertEquals(ts0 + 11_000L, byTime.get(tp0).timestamp());
            assertEquals(0, byTime.get(tp1).offset());
            // Past the last record: no offset.
            assertNull(c.offsetsForTimes(Map.of(tp0, ts0 + 1_000_000L)).get(tp0));

            c.assign(List.of(tp1));
            c.seek(tp1, byTime.get(tp1).offset());
            List<ConsumerRecord<String, String>> all = pollCount(c, 100, Duration.ofSeconds(30));
            for (int i = 0; i < 100; i++) assertEquals("p1-" + i, all.get(i).value());
        }
    }

    @Test
    void outOfRangeAfterDeleteRecords(TestInfo info) throws Exception {
        String topic = unique(info);
        createTopic(topic, 1, Map.of());
        produce(topic, 1, 20, 1_700_000_000_000L);
        TopicPartition tp = new TopicPartition(topic, 0);
        assertEquals(10, admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(10))).lowWatermarks().get(tp)
                .get(30, TimeUnit.SECONDS).lowWatermark());
        try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none"))) {
            assertEquals(10L, c.beginningOffsets(List.of(tp)).get(tp));
            c.assign(List.of(tp));
            c.seek(tp, 3);
            assertThrows(OffsetOutOfRangeException.class, () -> {
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                while (System.nanoTime() < deadline) c.poll(Duration.ofMillis(200));
            });
        }
        try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest"))) {
            c.assign(List.of(tp));
            c.seek(tp, 3);
            assertEquals(10, pollCount(c, 1, Duration.ofSeconds(30)).get(0).offset(), "reset to the log start");
        }
    }

    /** Commit sync and async with metadata; a new member of the group resumes from the commit. */
    @Test
    void commitSyncAsyncAndResume(TestInfo info) throws Exception {
        String topic = unique(info);
        String group = topic + "-g";
        createTopic(topic, 1, Map.of());
        produce(topic, 1, 30, 1_700_000_000_000L);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, group))) {
            c.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> got = pollCount(c, 10, Duration.ofSeconds(60));
            c.commitSync(Map.of(tp, new OffsetAndMetadata(10, "sync-meta")));
            assertEquals(new OffsetAndMetadata(10, "sync-meta"), c.committed(Set.of(tp)).get(tp));

            CompletableFuture<Map<TopicPartition, OffsetAndMetadata>> done = new CompletableFuture<>();
            c.commitAsync(Map.of(tp, new OffsetAndMetadata(15, "async-meta")), (offsets, err) -> {
                if (err != null) done.completeExceptionally(err);
                else done.complete(offsets);
            });
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (!done.isDone() && System.nanoTime() < deadline) c.poll(Duration.ofMillis(100));
            assertEquals(15, done.get(1, TimeUnit.SECONDS).get(tp).offset());
            assertEquals(new OffsetAndMetadata(15, "async-meta"), c.committed(Set.of(tp)).get(tp));
            assertTrue(got.size() >= 10);
        }
        // The AdminClient sees the same committed offset.
        assertEquals(15, admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
                .get(30, TimeUnit.SECONDS).get(tp).offset());
        try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, group))) {
            c.subscribe(List.of(topic));
            ConsumerRecord<String, String> first = pollCount(c, 1, Duration.ofSeconds(60)).get(0);
            assertEquals(15, first.offset(), "a new member resumes from the committed offset");
        }
    }

    /** Auto-commit commits what poll returned; the next member continues after it. */
    @Test
    void autoCommit(TestInfo info) throws Exception {
        String topic = unique(info);
        String group = topic + "-g";
        createTopic(topic, 1, Map.of());
        produce(topic, 1, 20, 1_700_000_000_000L);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, true, ConsumerConfig.AUTO_COMMIT_INTERVAL_MS_CONFIG, 100))) {
            c.subscribe(List.of(topic));
            pollCount(c, 20, Duration.ofSeconds(60));
        } // close() commits the position
        try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, group))) {
            assertEquals(20, c.committed(Set.of(tp)).get(tp).offset());
        }
    }

    /** Tracks assignments through the rebalance listener. */
    static final class Tracker implements ConsumerRebalanceListener {
        final Set<TopicPartition> owned = ConcurrentHashMap.newKeySet();
        // Since the last reset(): what was revoked, assigned and lost, and the callbacks in order.
        final Set<TopicPartition> revoked = ConcurrentHashMap.newKeySet();
        final Set<TopicPartition> assigned = ConcurrentHashMap.newKeySet();
        final Set<TopicPartition> lost = ConcurrentHashMap.newKeySet();
        final List<String> events = new CopyOnWriteArrayList<>();

        void reset() {
            revoked.clear();
            assigned.clear();
            lost.clear();
            events.clear();
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            owned.removeAll(partitions);
            revoked.addAll(partitions);
            if (!partitions.isEmpty()) events.add("revoked " + partitions);
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            owned.addAll(partitions);
            assigned.addAll(partitions);
            if (!partitions.isEmpty()) events.add("assigned " + partitions);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            owned.removeAll(partitions);
            lost.addAll(partitions);
            events.add("lost " + partitions);
        }
    }

    /** Polls every consumer in turn until {@code done} holds. */
    private static void pollAll(List<KafkaConsumer<String, String>> cs, Duration timeout, java.util.function.BooleanSupplier done,
                                Map<Integer, List<ConsumerRecord<String, String>>> sink) {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (!done.getAsBoolean()) {
            if (System.nanoTime() > deadline) throw new AssertionError("timed out polling the group");
            for (int i = 0; i < cs.size(); i++) {
                for (ConsumerRecord<String, String> r : cs.get(i).poll(Duration.ofMillis(100))) {
                    if (sink != null) sink.computeIfAbsent(i, k -> new ArrayList<>()).add(r);
                }
            }
        }
    }

    @Test
    void rangeAssignorSplitsPartitionsAndDeliversOnce(TestInfo info) throws Exception {
        String topic = unique(info);
        String group = topic + "-g";
        createTopic(topic, 4, Map.of());
        Map<String, Object> conf = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, RangeAssignor.class.getName(),
                ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 10000, ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 500);
        Tracker t1 = new Tracker();
        Tracker t2 = new Tracker();
        try (KafkaConsumer<String, String> c1 = consumer(conf); KafkaConsumer<String, String> c2 = consumer(conf)) {
            c1.subscribe(List.of(topic), t1);
            c2.subscribe(List.of(topic), t2);
            pollAll(List.of(c1, c2), Duration.ofSeconds(90), () -> t1.owned.size() == 2 && t2.owned.size() == 2, null);
            Set<TopicPartition> union = new HashSet<>(t1.owned);
            union.addAll(t2.owned);
            assertEquals(4, union.size(), "each partition has exactly one owner: " + t1.owned + " " + t2.owned);
            // Range: each member gets a contiguous pair.
            for (Tracker t : List.of(t1, t2)) {
                List<Integer> ps = t.owned.stream().map(TopicPartition::partition).sorted().toList();
                assertEquals(ps.get(0) + 1, ps.get(1), "range assignment " + ps);
            }
            assertEquals(c1.groupMetadata().generationId(), c2.groupMetadata().generationId());
            // Records produced into the stable group reach exactly the owner of their partition, once.
            produce(topic, 4, 25, 1_700_000_000_000L);
            Map<Integer, List<ConsumerRecord<String, String>>> got = new HashMap<>();
            pollAll(List.of(c1, c2), Duration.ofSeconds(60),
                    () -> got.values().stream().mapToInt(List::size).sum() >= 100, got);
            Set<String> values = new HashSet<>();
            List<Tracker> trackers = List.of(t1, t2);
            got.forEach((member, records) -> records.forEach(r -> {
                assertTrue(values.add(r.value()), "delivered twice: " + r.value());
                assertTrue(trackers.get(member).owned.contains(new TopicPartition(r.topic(), r.partition())),
                        "record of a partition the member does not own: " + r);
            }));
            assertEquals(100, values.size());
        }
        assertEquals(0, admin.describeConsumerGroups(List.of(group)).all().get(30, TimeUnit.SECONDS)
                .get(group).members().size(), "both members left on close");
    }

    /** Cooperative-sticky: a joiner takes partitions without the first member losing the rest. */
    @Test
    void cooperativeStickyRebalancesIncrementally(TestInfo info) throws Exception {
        String topic = unique(info);
        String group = topic + "-g";
        createTopic(topic, 4, Map.of());
        Map<String, Object> conf = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, CooperativeStickyAssignor.class.getName(),
                ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 10000, ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 500);
        Tracker t1 = new Tracker();
        Tracker t2 = new Tracker();
        try (KafkaConsumer<String, String> c1 = consumer(conf)) {
            c1.subscribe(List.of(topic), t1);
            pollAll(List.of(c1), Duration.ofSeconds(60), () -> t1.owned.size() == 4, null);
            Set<TopicPartition> before = new HashSet<>(t1.owned);
            t1.reset();
            try (KafkaConsumer<String, String> c2 = consumer(conf)) {
                c2.subscribe(List.of(topic), t2);
                pollAll(List.of(c1, c2), Duration.ofSeconds(90), () -> t1.owned.size() == 2 && t2.owned.size() == 2, null);
                assertTrue(before.containsAll(t1.owned), "the first member kept a subset (sticky)");
                // Cooperative: the first member revoked exactly the partitions that moved, lost none,
                // and was never re-assigned what it kept.
                assertEquals(t2.owned, t1.revoked, "revoked only what moved: " + t1.events);
                assertEquals(Set.of(), t1.lost, "no partitions lost: " + t1.events);
                assertEquals(Set.of(), t1.assigned, "nothing re-assigned to the first member: " + t1.events);
            }
            // The second member leaves: its partitions come back to the first.
            pollAll(List.of(c1), Duration.ofSeconds(60), () -> t1.owned.size() == 4, null);
        }
    }

    /** Static membership: a member that restarts with its group.instance.id within the session
     *  timeout gets its partitions back without a rebalance of the others. */
    @Test
    void staticMembershipRejoinsWithoutRebalance(TestInfo info) throws Exception {
        String topic = unique(info);
        String group = topic + "-g";
        createTopic(topic, 2, Map.of());
        Map<String, Object> base = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, RangeAssignor.class.getName(),
                ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 30000, ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 500);
        Map<String, Object> confA = new HashMap<>(base);
        confA.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "static-a");
        Map<String, Object> confB = new HashMap<>(base);
        confB.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "static-b");
        Tracker ta = new Tracker();
        Tracker tb = new Tracker();
        try (KafkaConsumer<String, String> a = consumer(confA)) {
            a.subscribe(List.of(topic), ta);
            KafkaConsumer<String, String> b = consumer(confB);
            b.subscribe(List.of(topic), tb);
            pollAll(List.of(a, b), Duration.ofSeconds(90), () -> ta.owned.size() == 1 && tb.owned.size() == 1, null);
            int generation = a.groupMetadata().generationId();
            Set<TopicPartition> bOwned = new HashSet<>(tb.owned);
            ta.reset();
            // A static member's close does not leave the group (no LeaveGroup): no rebalance.
            b.close(Duration.ofSeconds(10));
            Tracker tb2 = new Tracker();
            try (KafkaConsumer<String, String> b2 = consumer(confB)) {
                b2.subscribe(List.of(topic), tb2);
                pollAll(List.of(a, b2), Duration.ofSeconds(60), () -> tb2.owned.size() == 1, null);
                assertEquals(bOwned, tb2.owned, "the restarted static member got its partition back");
                // Keep polling both for a few heartbeats: the other member must see no rebalance.
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(3);
                pollAll(List.of(a, b2), Duration.ofSeconds(30), () -> System.nanoTime() > until, null);
                assertEquals(List.of(), ta.events, "the other member saw no rebalance");
                assertEquals(generation, a.groupMetadata().generationId(), "same generation");
            }
        }
        var desc = admin.describeConsumerGroups(List.of(group)).all().get(30, TimeUnit.SECONDS).get(group);
        assertNotNull(desc);
    }
}
