package dev.moldau.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.protocol.ApiKeys;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;

/**
 * The KIP-848 consumer group protocol (group.protocol=consumer). Runs as soon as the broker
 * advertises ConsumerGroupHeartbeat; until then it is reported as skipped, by name.
 */
class ConsumerGroupProtocolTest extends BrokerTestBase {

    /** A short heartbeat interval (the broker's bounds allow it) so rebalances take a second. */
    @Override
    protected Map<String, String> brokerSettings() {
        Map<String, String> s = super.brokerSettings();
        s.put("group.consumer.min.heartbeat.interval.ms", "100");
        s.put("group.consumer.heartbeat.interval.ms", "500");
        return s;
    }

    /** Records every callback of a member's rebalance listener. */
    static final class Recorder implements ConsumerRebalanceListener {
        final Set<TopicPartition> owned = new HashSet<>();
        final List<Set<TopicPartition>> revoked = new ArrayList<>();

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            if (!partitions.isEmpty()) revoked.add(new HashSet<>(partitions));
            owned.removeAll(partitions);
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            owned.addAll(partitions);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            throw new AssertionError("partitions lost: " + partitions);
        }
    }

    @Test
    void joiningMemberTakesOnlyWhatMovesAndTheAdminSeesAConsumerGroup(TestInfo info) throws Exception {
        String topic = unique(info);
        String group = topic + "-g";
        createTopic(topic, 4, Map.of());
        Map<String, Object> conf = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        Recorder r1 = new Recorder();
        Recorder r2 = new Recorder();
        try (KafkaConsumer<String, String> c1 = consumer(conf); KafkaConsumer<String, String> c2 = consumer(conf)) {
            c1.subscribe(List.of(topic), r1);
            waitFor("first member owns everything", Duration.ofSeconds(60), () -> {
                c1.poll(Duration.ofMillis(100));
                return r1.owned.size() == 4;
            });
            Set<TopicPartition> before = new HashSet<>(r1.owned);
            c2.subscribe(List.of(topic), r2);
            waitFor("2 + 2", Duration.ofSeconds(60), () -> {
                c1.poll(Duration.ofMillis(100));
                c2.poll(Duration.ofMillis(100));
                return r1.owned.size() == 2 && r2.owned.size() == 2;
            });
            // Incremental: the first member gave up exactly the two partitions that moved.
            Set<TopicPartition> moved = new HashSet<>(before);
            moved.removeAll(r1.owned);
            Set<TopicPartition> revoked = new HashSet<>();
            r1.revoked.forEach(revoked::addAll);
            assertEquals(moved, revoked);
            assertEquals(r2.owned, moved);

            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all()
                    .get(30, TimeUnit.SECONDS).get(group);
            assertEquals(GroupType.CONSUMER, d.type());
            assertEquals(2, d.members().size());
            Set<TopicPartition> assigned = new HashSet<>();
            for (MemberDescription m : d.members()) {
                assigned.addAll(m.assignment().topicPartitions());
                assertTrue(m.memberEpoch().orElse(-1) > 0, "member epoch " + m.memberEpoch());
            }
            assertEquals(4, assigned.size());
            Collection<GroupListing> listed = admin.listGroups().all().get(30, TimeUnit.SECONDS);
            assertTrue(listed.stream().anyMatch(g -> g.groupId().equals(group)
                    && g.type().orElse(null) == GroupType.CONSUMER), "listGroups: " + listed);
        }
    }

    @Test
    void serverSideRegexFollowsTopicCreation(TestInfo info) throws Exception {
        String prefix = unique(info);
        createTopic(prefix + "-a", 2, Map.of());
        Map<String, Object> conf = new HashMap<>(Map.of(ConsumerConfig.GROUP_ID_CONFIG, prefix + "-g",
                ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer"));
        try (KafkaConsumer<String, String> c = consumer(conf)) {
            c.subscribe(new SubscriptionPattern(prefix + "-.*"));
            waitFor("the first matching topic", Duration.ofSeconds(60), () -> {
                c.poll(Duration.ofMillis(100));
                return c.assignment().size() == 2;
            });
            createTopic(prefix + "-b", 3, Map.of());
            waitFor("the new matching topic", Duration.ofSeconds(60), () -> {
                c.poll(Duration.ofMillis(100));
                return c.assignment().size() == 5;
            });
        }
    }

    /**
     * KIP-848 online upgrade and downgrade: a consumer-protocol member joins a running classic
     * group (which becomes a consumer group whose classic member keeps working through
     * JoinGroup/SyncGroup), both consume every record once between them, and when the
     * consumer-protocol member leaves the group is classic again.
     */
    @Test
    void classicGroupUpgradesOnlineAndDowngradesWhenTheLastNewMemberLeaves(TestInfo info) throws Exception {
        String topic = unique(info);
        String group = topic + "-g";
        createTopic(topic, 4, Map.of());
        Map<String, Object> classicConf = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic",
                ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 300,
                ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 10000);
        Map<String, Object> consumerConf = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        try (KafkaConsumer<String, String> classic = consumer(classicConf)) {
            classic.subscribe(List.of(topic));
            waitFor("the classic member owns everything", Duration.ofSeconds(60), () -> {
                classic.poll(Duration.ofMillis(100));
                return classic.assignment().size() == 4;
            });
            assertEquals(GroupType.CLASSIC, groupType(group));
            Set<String> seen = new HashSet<>();
            try (KafkaConsumer<String, String> modern = consumer(consumerConf)) {
                modern.subscribe(List.of(topic));
                waitFor("2 + 2 across the protocols", Duration.ofSeconds(90), () -> {
                    classic.poll(Duration.ofMillis(100));
                    modern.poll(Duration.ofMillis(100));
                    return classic.assignment().size() == 2 && modern.assignment().size() == 2;
                });
                assertEquals(GroupType.CONSUMER, groupType(group));
                try (KafkaProducer<String, String> p = producer(Map.of())) {
                    for (int i = 0; i < 40; i++) p.send(new ProducerRecord<>(topic, i % 4, null, "v" + i));
                    p.flush();
                }
                waitFor("40 records across the mixed group", Duration.ofSeconds(60), () -> {
                    for (KafkaConsumer<String, String> c : List.of(classic, modern)) {
                        for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                            assertTrue(seen.add(r.value()), "delivered twice: " + r.value());
                        }
                    }
                    return seen.size() == 40;
                });
                modern.commitSync();
                classic.commitSync();
            }
            waitFor("the classic member owns everything again", Duration.ofSeconds(90), () -> {
                for (ConsumerRecord<String, String> r : classic.poll(Duration.ofMillis(100))) {
                    assertTrue(seen.add(r.value()), "delivered twice after the downgrade: " + r.value());
                }
                return classic.assignment().size() == 4;
            });
            waitFor("the group is classic again", Duration.ofSeconds(30), () -> groupType(group) == GroupType.CLASSIC);
            assertEquals(40, seen.size());
        }
    }

    private GroupType groupType(String group) {
        try {
            return admin.describeConsumerGroups(List.of(group)).all().get(30, TimeUnit.SECONDS).get(group).type();
        } catch (Exception e) {
            throw new IllegalStateException("describeConsumerGroups " + group, e);
        }
    }

    /** As Kafka: a server-side regex is matched against every topic, internal ones included. */
    @Test
    void serverSideRegexMatchesAnInternalTopicItNames(TestInfo info) throws Exception {
        Map<String, Object> conf = new HashMap<>(Map.of(ConsumerConfig.GROUP_ID_CONFIG, unique(info) + "-g",
                ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer"));
        try (KafkaConsumer<String, String> c = consumer(conf)) {
            // The group's own FindCoordinator makes sure __consumer_offsets exists.
            c.subscribe(new SubscriptionPattern("__consumer_offsets"));
            waitFor("every __consumer_offsets partition", Duration.ofSeconds(60), () -> {
                c.poll(Duration.ofMillis(100));
                return !c.assignment().isEmpty()
                        && c.assignment().size() == c.partitionsFor("__consumer_offsets").size();
            });
            assertTrue(c.assignment().stream().allMatch(tp -> tp.topic().equals("__consumer_offsets")),
                    "assignment: " + c.assignment());
        }
    }

    @BeforeEach
    void requireKip848() {
        assumeTrue(KafkaApis.supports(bootstrap(), ApiKeys.CONSUMER_GROUP_HEARTBEAT),
                "ConsumerGroupHeartbeat (KIP-848) not advertised by this broker yet");
    }

    @Test
    void twoMembersSplitPartitions(TestInfo info) throws Exception {
        String topic = unique(info);
        createTopic(topic, 4, Map.of());
        Map<String, Object> conf = Map.of(ConsumerConfig.GROUP_ID_CONFIG, topic + "-g",
                ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        try (KafkaConsumer<String, String> c1 = consumer(conf); KafkaConsumer<String, String> c2 = consumer(conf)) {
            c1.subscribe(List.of(topic));
            c2.subscribe(List.of(topic));
            waitFor("both members assigned", Duration.ofSeconds(90), () -> {
                c1.poll(Duration.ofMillis(100));
                c2.poll(Duration.ofMillis(100));
                return c1.assignment().size() == 2 && c2.assignment().size() == 2;
            });
            try (KafkaProducer<String, String> p = producer(Map.of())) {
                for (int i = 0; i < 40; i++) p.send(new ProducerRecord<>(topic, i % 4, null, "v" + i));
                p.flush();
            }
            Set<String> seen = new HashSet<>();
            waitFor("40 records", Duration.ofSeconds(60), () -> {
                for (KafkaConsumer<String, String> c : List.of(c1, c2)) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                        assertTrue(c.assignment().contains(new TopicPartition(r.topic(), r.partition())));
                        assertTrue(seen.add(r.value()), "delivered twice: " + r.value());
                    }
                }
                return seen.size() == 40;
            });
            assertEquals(40, seen.size());
        }
    }
}
