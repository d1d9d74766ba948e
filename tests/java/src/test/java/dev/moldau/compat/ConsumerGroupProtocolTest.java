package dev.moldau.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
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
