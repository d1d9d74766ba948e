package dev.moldau.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.errors.GroupAuthorizationException;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.resource.ResourceType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;

/**
 * {@link Admin#describeConsumerGroups} (ConsumerGroupDescribe) of KIP-848 groups under ACLs: as
 * Kafka 4.4's {@code KafkaApis.handleConsumerGroupDescribe}, a caller who may DESCRIBE a group
 * but not every topic its members are assigned gets TopicAuthorizationException for that group,
 * with Kafka's message, while the other groups of the same call are described.
 */
class ConsumerGroupDescribeAclTest extends SaslAclTestBase {
    private static final String MESSAGE =
            "The group has described topic(s) that the client is not authorized to describe.";

    private KafkaConsumer<String, String> member(String group, List<String> topics) {
        Map<String, Object> conf = new HashMap<>(sasl("admin", "admin-secret"));
        conf.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        conf.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        KafkaConsumer<String, String> c = consumer(conf);
        c.subscribe(topics);
        return c;
    }

    private static Set<TopicPartition> assigned(ConsumerGroupDescription d) {
        Set<TopicPartition> out = new HashSet<>();
        for (MemberDescription m : d.members()) out.addAll(m.assignment().topicPartitions());
        return out;
    }

    private static Throwable failure(KafkaFuture<ConsumerGroupDescription> f) {
        return assertThrows(ExecutionException.class, () -> f.get(30, TimeUnit.SECONDS)).getCause();
    }

    @Test
    void groupsWithTopicsTheCallerMayNotDescribeAreRefused(TestInfo info) throws Exception {
        String prefix = unique(info);
        String shown = prefix + "-shown";
        String hidden = prefix + "-hidden";
        String mixed = prefix + "-mixed";
        String plain = prefix + "-plain";
        String foreign = prefix + "-foreign";
        createTopic(shown, 2, Map.of());
        createTopic(hidden, 1, Map.of());
        admin.createAcls(List.of(allow(ResourceType.GROUP, mixed, AclOperation.DESCRIBE),
                allow(ResourceType.GROUP, plain, AclOperation.DESCRIBE),
                allow(ResourceType.TOPIC, shown, AclOperation.DESCRIBE))).all().get(30, TimeUnit.SECONDS);

        Set<TopicPartition> both = new HashSet<>(parts(shown, 2));
        both.addAll(parts(hidden, 1));
        try (KafkaConsumer<String, String> m = member(mixed, List.of(shown, hidden));
             KafkaConsumer<String, String> p = member(plain, List.of(shown));
             KafkaConsumer<String, String> f = member(foreign, List.of(shown));
             Admin alice = adminAs("alice", "alice-secret")) {
            waitFor("the groups' assignments", Duration.ofSeconds(60), () -> {
                for (KafkaConsumer<String, String> c : List.of(m, p, f)) c.poll(Duration.ofMillis(50));
                return m.assignment().equals(both) && p.assignment().equals(parts(shown, 2))
                        && f.assignment().equals(parts(shown, 2));
            });

            Map<String, KafkaFuture<ConsumerGroupDescription>> described =
                    alice.describeConsumerGroups(List.of(mixed, plain, foreign)).describedGroups();
            ConsumerGroupDescription d = described.get(plain).get(30, TimeUnit.SECONDS);
            assertEquals(1, d.members().size());
            assertEquals(parts(shown, 2), assigned(d));
            Throwable e = failure(described.get(mixed));
            assertInstanceOf(TopicAuthorizationException.class, e);
            assertEquals(MESSAGE, e.getMessage());
            assertInstanceOf(GroupAuthorizationException.class, failure(described.get(foreign)));

            admin.createAcls(List.of(allow(ResourceType.TOPIC, hidden, AclOperation.DESCRIBE)))
                    .all().get(30, TimeUnit.SECONDS);
            waitFor("mixed described once alice may describe both topics", Duration.ofSeconds(60), () -> {
                for (KafkaConsumer<String, String> c : List.of(m, p, f)) c.poll(Duration.ofMillis(50));
                try {
                    ConsumerGroupDescription g = alice.describeConsumerGroups(List.of(mixed))
                            .describedGroups().get(mixed).get(30, TimeUnit.SECONDS);
                    return assigned(g).equals(both);
                } catch (ExecutionException | InterruptedException | java.util.concurrent.TimeoutException x) {
                    return false;
                }
            });
        }
    }
}
