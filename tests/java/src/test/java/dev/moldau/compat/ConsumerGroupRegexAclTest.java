package dev.moldau.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;

/**
 * A KIP-848 server-side regex ({@link SubscriptionPattern}) under ACLs, on a SASL_PLAINTEXT
 * listener with Kafka's StandardAuthorizer: as Kafka 4.4, the regex resolves only to topics the
 * member's principal may DESCRIBE, and the member gets no error for the others. A grant adds a
 * topic, taking it back removes it.
 */
class ConsumerGroupRegexAclTest extends SaslAclTestBase {
    @Test
    void regexResolvesOnlyToTopicsThePrincipalMayDescribe(TestInfo info) throws Exception {
        String prefix = unique(info);
        String group = prefix + "-g";
        String seen = prefix + "-seen";
        String hidden = prefix + "-hidden";
        createTopic(seen, 2, Map.of());
        createTopic(hidden, 1, Map.of());
        // READ implies DESCRIBE; nothing on `hidden`.
        admin.createAcls(List.of(allow(ResourceType.GROUP, group, AclOperation.READ),
                allow(ResourceType.TOPIC, seen, AclOperation.READ))).all().get(30, TimeUnit.SECONDS);

        Map<String, Object> conf = new HashMap<>(sasl("alice", "alice-secret"));
        conf.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        conf.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        try (KafkaConsumer<String, String> c = consumer(conf)) {
            c.subscribe(new SubscriptionPattern(prefix + "-.*"));
            Set<TopicPartition> onlySeen = parts(seen, 2);
            waitFor("the describable topic", Duration.ofSeconds(60), () -> {
                c.poll(Duration.ofMillis(100));
                return c.assignment().equals(onlySeen);
            });
            // Several heartbeats later the other topic is still not assigned, and poll raised
            // nothing (the member is not told about it).
            long until = System.nanoTime() + Duration.ofMillis(1500).toNanos();
            while (System.nanoTime() < until) c.poll(Duration.ofMillis(100));
            assertEquals(onlySeen, c.assignment());

            AclBinding grant = allow(ResourceType.TOPIC, hidden, AclOperation.READ);
            admin.createAcls(List.of(grant)).all().get(30, TimeUnit.SECONDS);
            Set<TopicPartition> both = new HashSet<>(onlySeen);
            both.addAll(parts(hidden, 1));
            waitFor("the granted topic", Duration.ofSeconds(60), () -> {
                c.poll(Duration.ofMillis(100));
                return c.assignment().equals(both);
            });

            admin.deleteAcls(List.of(new AclBindingFilter(
                    new ResourcePatternFilter(ResourceType.TOPIC, hidden, PatternType.LITERAL),
                    new AccessControlEntryFilter("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW))))
                    .all().get(30, TimeUnit.SECONDS);
            waitFor("the revoked topic to go", Duration.ofSeconds(60), () -> {
                try {
                    c.poll(Duration.ofMillis(100));
                } catch (TopicAuthorizationException e) {
                    // Until its assignment follows, the client still uses the revoked topic
                    // (committed offsets, fetches) and is refused: for that topic only.
                    assertEquals(Set.of(hidden), e.unauthorizedTopics());
                }
                return c.assignment().equals(onlySeen);
            });
        }
    }
}
