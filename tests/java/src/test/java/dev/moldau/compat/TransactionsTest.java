package dev.moldau.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.protocol.ApiKeys;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;

/**
 * Transactions with the Java client (issue 11, engineer `txn`). These run as soon as the broker
 * advertises the transaction APIs; until then they are reported as skipped, by name.
 */
class TransactionsTest extends BrokerTestBase {

    @BeforeEach
    void requireTransactions() {
        assumeTrue(KafkaApis.supports(bootstrap(), ApiKeys.ADD_PARTITIONS_TO_TXN)
                        && KafkaApis.supports(bootstrap(), ApiKeys.END_TXN)
                        && KafkaApis.supports(bootstrap(), ApiKeys.TXN_OFFSET_COMMIT),
                "transactions not advertised by this broker yet (issue 11)");
    }

    private KafkaProducer<String, String> txProducer(String txId) {
        return producer(Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txId,
                ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 30000));
    }

    @Test
    void committedVisibleAbortedNot(TestInfo info) throws Exception {
        String topic = unique(info);
        createTopic(topic, 2, Map.of());
        try (KafkaProducer<String, String> p = txProducer(topic + "-tx")) {
            p.initTransactions();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 0, "k", "c1"));
            p.send(new ProducerRecord<>(topic, 1, "k", "c2"));
            p.send(new ProducerRecord<>(topic, 0, "k", "c3"));
            p.commitTransaction();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 0, "k", "a1"));
            p.send(new ProducerRecord<>(topic, 1, "k", "a2"));
            p.flush();
            p.abortTransaction();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 1, "k", "c4"));
            p.commitTransaction();
        }
        List<TopicPartition> tps = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1));
        try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"))) {
            c.assign(tps);
            List<String> values = new ArrayList<>();
            pollCount(c, 4, Duration.ofSeconds(60)).forEach(r -> values.add(r.value()));
            values.sort(String::compareTo);
            assertEquals(List.of("c1", "c2", "c3", "c4"), values);
            // Nothing else arrives (the aborted records stay hidden).
            assertEquals(0, c.poll(Duration.ofSeconds(2)).count());
        }
        try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted"))) {
            c.assign(tps);
            List<String> values = new ArrayList<>();
            pollCount(c, 6, Duration.ofSeconds(60)).forEach(r -> values.add(r.value()));
            values.sort(String::compareTo);
            assertEquals(List.of("a1", "a2", "c1", "c2", "c3", "c4"), values);
        }
    }

    /** Consume-transform-produce: offsets committed inside the transaction. */
    @Test
    void sendOffsetsToTransaction(TestInfo info) throws Exception {
        String in = unique(info) + "-in";
        String out = in.replace("-in", "-out");
        String group = in + "-g";
        createTopic(in, 1, Map.of());
        createTopic(out, 1, Map.of());
        try (KafkaProducer<String, String> p = producer(Map.of())) {
            for (int i = 0; i < 10; i++) p.send(new ProducerRecord<>(in, 0, null, "v" + i));
            p.flush();
        }
        TopicPartition inTp = new TopicPartition(in, 0);
        try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"));
             KafkaProducer<String, String> p = txProducer(in + "-tx")) {
            p.initTransactions();
            c.subscribe(List.of(in));
            List<ConsumerRecord<String, String>> got = pollCount(c, 10, Duration.ofSeconds(60));
            p.beginTransaction();
            for (ConsumerRecord<String, String> r : got) p.send(new ProducerRecord<>(out, 0, null, r.value().toUpperCase()));
            p.sendOffsetsToTransaction(Map.of(inTp, new OffsetAndMetadata(10)), c.groupMetadata());
            p.commitTransaction();
            assertEquals(10, c.committed(Set.of(inTp)).get(inTp).offset());
        }
        try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"))) {
            c.assign(List.of(new TopicPartition(out, 0)));
            assertEquals("V0", pollCount(c, 10, Duration.ofSeconds(60)).get(0).value());
        }
    }

    /**
     * Transaction version 2 (KIP-890 part 2): the broker finalizes {@code transaction.version=2}
     * in ApiVersions, so this client ends each transaction with EndTxn v5, which bumps the
     * producer epoch (the markers carry the bumped epoch, fencing late writes of the ended
     * transaction), and sends no AddPartitionsToTxn/AddOffsetsToTxn: the partition leaders and
     * the group coordinator add the partitions from Produce v12 and TxnOffsetCommit v5. Three
     * transactions (commit with offsets, abort, commit) after initTransactions leave the epoch
     * three past the first one; with transaction version 1 it would not move.
     */
    @Test
    void transactionVersion2BumpsTheEpochPerTransaction(TestInfo info) throws Exception {
        FinalizedVersionRange tv = admin().describeFeatures().featureMetadata().get()
                .finalizedFeatures().get("transaction.version");
        assertEquals(2, tv == null ? -1 : tv.maxVersionLevel(), "transaction.version finalized");
        String topic = unique(info);
        String group = topic + "-g";
        String txId = topic + "-tx";
        createTopic(topic, 2, Map.of());
        TopicPartition tp0 = new TopicPartition(topic, 0);
        int first;
        try (KafkaProducer<String, String> p = txProducer(txId)) {
            p.initTransactions();
            first = describe(txId).producerEpoch();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 0, "k", "c1"));
            p.send(new ProducerRecord<>(topic, 1, "k", "c2"));
            p.sendOffsetsToTransaction(Map.of(tp0, new OffsetAndMetadata(7)),
                    new org.apache.kafka.clients.consumer.ConsumerGroupMetadata(group));
            p.commitTransaction();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 0, "k", "a1"));
            p.flush();
            p.abortTransaction();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 1, "k", "c3"));
            p.commitTransaction();
        }
        TransactionDescription d = describe(txId);
        assertEquals(first + 3, d.producerEpoch(), "one epoch bump per transaction");
        assertEquals(7, admin().listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get()
                .get(tp0).offset());
        try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"))) {
            c.assign(List.of(tp0, new TopicPartition(topic, 1)));
            List<String> values = new ArrayList<>();
            pollCount(c, 3, Duration.ofSeconds(60)).forEach(r -> values.add(r.value()));
            values.sort(String::compareTo);
            assertEquals(List.of("c1", "c2", "c3"), values);
            assertEquals(0, c.poll(Duration.ofSeconds(2)).count());
        }
        // A second instance fences the first as before.
        try (KafkaProducer<String, String> p = txProducer(txId)) {
            p.initTransactions();
            assertEquals(first + 4, describe(txId).producerEpoch());
        }
    }

    private TransactionDescription describe(String txId) throws Exception {
        return admin().describeTransactions(List.of(txId)).description(txId).get();
    }
}
