package dev.moldau.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.GroupIdNotFoundException;
import org.apache.kafka.common.errors.GroupNotEmptyException;
import org.apache.kafka.common.errors.InvalidPartitionsException;
import org.apache.kafka.common.errors.InvalidReplicationFactorException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.TestInfo;

/** The Java AdminClient against Moldau: every operation Moldau implements, and a prompt
 *  UNSUPPORTED_VERSION (never a hang) for every one it does not. */
class AdminTest extends BrokerTestBase {

    private static <T> T get(KafkaFuture<T> f) throws Exception {
        return f.get(60, TimeUnit.SECONDS);
    }

    private static Throwable cause(KafkaFuture<?> f) {
        ExecutionException e = assertThrows(ExecutionException.class, () -> f.get(60, TimeUnit.SECONDS));
        return e.getCause();
    }

    @Test
    void topicLifecycle(TestInfo info) throws Exception {
        String topic = unique(info);
        // validateOnly creates nothing.
        get(admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1)), new CreateTopicsOptions().validateOnly(true)).all());
        assertFalse(get(admin.listTopics().names()).contains(topic));

        var created = admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1)
                .configs(Map.of("retention.ms", "3600000", "cleanup.policy", "compact"))));
        get(created.all());
        assertEquals(3, get(created.numPartitions(topic)));
        assertEquals(1, get(created.replicationFactor(topic)));
        assertNotNull(get(created.topicId(topic)));
        assertInstanceOf(TopicExistsException.class, cause(admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all()));
        assertInstanceOf(InvalidReplicationFactorException.class,
                cause(admin.createTopics(List.of(new NewTopic(topic + "-rf", 1, (short) 3))).all()));

        assertTrue(get(admin.listTopics().names()).contains(topic));
        TopicDescription d = get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic);
        assertEquals(3, d.partitions().size());
        Node self = get(admin.describeCluster().nodes()).iterator().next();
        d.partitions().forEach(p -> {
            assertEquals(self.id(), p.leader().id());
            assertEquals(List.of(self.id()), p.replicas().stream().map(Node::id).toList());
            assertEquals(List.of(self.id()), p.isr().stream().map(Node::id).toList());
        });
        assertFalse(d.isInternal());

        get(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all());
        waitFor("5 partitions", Duration.ofSeconds(30), () -> {
            try {
                return get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic).partitions().size() == 5;
            } catch (Exception e) {
                return false;
            }
        });
        assertInstanceOf(InvalidPartitionsException.class,
                cause(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(2))).all()));

        get(admin.deleteTopics(List.of(topic)).all());
        waitFor("topic gone", Duration.ofSeconds(30), () -> {
            try {
                return !get(admin.listTopics().names()).contains(topic);
            } catch (Exception e) {
                return false;
            }
        });
        assertInstanceOf(UnknownTopicOrPartitionException.class, cause(admin.deleteTopics(List.of(topic)).all()));
        assertInstanceOf(UnknownTopicOrPartitionException.class,
                cause(admin.describeTopics(List.of(topic)).allTopicNames()));
    }

    @Test
    void configs(TestInfo info) throws Exception {
        String topic = unique(info);
        createTopic(topic, 1, Map.of("retention.ms", "3600000"));
        ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Config c = get(admin.describeConfigs(List.of(res)).all()).get(res);
        ConfigEntry retention = c.get("retention.ms");
        assertEquals("3600000", retention.value());
        assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, retention.source());
        ConfigEntry segment = c.get("segment.bytes");
        assertEquals("1073741824", segment.value());
        assertTrue(segment.isDefault());
        assertEquals("delete", c.get("cleanup.policy").value());

        get(admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND),
                new AlterConfigOp(new ConfigEntry("max.message.bytes", "65536"), AlterConfigOp.OpType.SET)))).all());
        c = get(admin.describeConfigs(List.of(res)).all()).get(res);
        assertEquals("7200000", c.get("retention.ms").value());
        assertEquals("delete,compact", c.get("cleanup.policy").value());
        assertEquals("65536", c.get("max.message.bytes").value());

        get(admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE),
                new AlterConfigOp(new ConfigEntry("cleanup.policy", "delete"), AlterConfigOp.OpType.SUBTRACT)))).all());
        c = get(admin.describeConfigs(List.of(res)).all()).get(res);
        assertEquals("604800000", c.get("retention.ms").value());
        assertTrue(c.get("retention.ms").isDefault());
        assertEquals("compact", c.get("cleanup.policy").value());

        // A bad value is refused with Kafka's INVALID_CONFIG.
        Throwable bad = cause(admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "soon"), AlterConfigOp.OpType.SET)))).all());
        assertEquals("InvalidConfigurationException", bad.getClass().getSimpleName(), String.valueOf(bad));

        // Broker configs are described too.
        Node self = get(admin.describeCluster().nodes()).iterator().next();
        ConfigResource brokerRes = new ConfigResource(ConfigResource.Type.BROKER, Integer.toString(self.id()));
        Config bc = get(admin.describeConfigs(List.of(brokerRes)).all()).get(brokerRes);
        assertNotNull(bc.get("num.partitions"), "broker config num.partitions");
        assertNotNull(bc.get("log.retention.ms") != null ? bc.get("log.retention.ms") : bc.get("log.retention.hours"));
    }

    @Test
    void clusterAndFeatures() throws Exception {
        DescribeClusterResult cluster = admin.describeCluster();
        Collection<Node> nodes = get(cluster.nodes());
        assertEquals(1, nodes.size());
        Node node = nodes.iterator().next();
        assertEquals("127.0.0.1", node.host());
        assertEquals(Integer.parseInt(bootstrap().split(":")[1]), node.port());
        assertEquals(node.id(), get(cluster.controller()).id());
        String clusterId = get(cluster.clusterId());
        assertNotNull(clusterId);
        assertFalse(clusterId.isEmpty());
        FeatureMetadata features = get(admin.describeFeatures().featureMetadata());
        assertNotNull(features);
    }

    @Test
    void offsetsAndRecords(TestInfo info) throws Exception {
        String topic = unique(info);
        createTopic(topic, 1, Map.of());
        long ts0 = 1_700_000_000_000L;
        try (KafkaProducer<String, String> p = producer(Map.of())) {
            for (int i = 0; i < 10; i++) p.send(new ProducerRecord<>(topic, 0, ts0 + i * 10, null, "v" + i));
            p.flush();
        }
        TopicPartition tp = new TopicPartition(topic, 0);
        ListOffsetsResult r = admin.listOffsets(Map.of(tp, OffsetSpec.earliest()));
        assertEquals(0, get(r.partitionResult(tp)).offset());
        assertEquals(10, get(admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp)).offset());
        var byTime = get(admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(ts0 + 35))).partitionResult(tp));
        assertEquals(4, byTime.offset());
        assertEquals(ts0 + 40, byTime.timestamp());
        var max = get(admin.listOffsets(Map.of(tp, OffsetSpec.maxTimestamp())).partitionResult(tp));
        assertEquals(9, max.offset());
        assertEquals(ts0 + 90, max.timestamp());

        assertEquals(6, get(admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(6))).lowWatermarks().get(tp)).lowWatermark());
        assertEquals(6, get(admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp)).offset());
        // Beyond the high watermark: OFFSET_OUT_OF_RANGE.
        Throwable t = cause(admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(99))).lowWatermarks().get(tp));
        assertEquals("OffsetOutOfRangeException", t.getClass().getSimpleName(), String.valueOf(t));
    }

    @Test
    void logDirs(TestInfo info) throws Exception {
        String topic = unique(info);
        createTopic(topic, 2, Map.of());
        try (KafkaProducer<String, String> p = producer(Map.of())) {
            p.send(new ProducerRecord<>(topic, 0, null, "x".repeat(1000))).get(30, TimeUnit.SECONDS);
        }
        Node self = get(admin.describeCluster().nodes()).iterator().next();
        Map<String, LogDirDescription> dirs = get(admin.describeLogDirs(List.of(self.id())).allDescriptions()).get(self.id());
        assertEquals(1, dirs.size());
        LogDirDescription dir = dirs.values().iterator().next();
        assertTrue(dir.error() == null, String.valueOf(dir.error()));
        var replica = dir.replicaInfos().get(new TopicPartition(topic, 0));
        assertNotNull(replica, "partition 0 in the log dir");
        assertTrue(replica.size() > 1000, "size " + replica.size());
        assertNotNull(dir.replicaInfos().get(new TopicPartition(topic, 1)));
        assertTrue(dir.totalBytes().isPresent() && dir.usableBytes().isPresent(), "total/usable bytes reported");
    }

    @Test
    void consumerGroups(TestInfo info) throws Exception {
        String topic = unique(info);
        String group = topic + "-g";
        createTopic(topic, 2, Map.of());
        try (KafkaProducer<String, String> p = producer(Map.of())) {
            for (int i = 0; i < 10; i++) p.send(new ProducerRecord<>(topic, i % 2, null, "v" + i));
            p.flush();
        }
        TopicPartition tp0 = new TopicPartition(topic, 0);
        TopicPartition tp1 = new TopicPartition(topic, 1);
        try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.CLIENT_ID_CONFIG, "admin-test-client"))) {
            c.subscribe(List.of(topic));
            pollCount(c, 10, Duration.ofSeconds(60));
            c.commitSync(Map.of(tp0, new OffsetAndMetadata(5), tp1, new OffsetAndMetadata(3)));

            Collection<GroupListing> listed = get(admin.listGroups().all());
            GroupListing mine = listed.stream().filter(g -> g.groupId().equals(group)).findFirst().orElseThrow();
            assertEquals(Optional.of(GroupState.STABLE), mine.groupState());
            assertEquals("consumer", mine.protocol());

            ConsumerGroupDescription d = get(admin.describeConsumerGroups(List.of(group)).all()).get(group);
            assertEquals(GroupState.STABLE, d.groupState());
            assertEquals(1, d.members().size());
            var member = d.members().iterator().next();
            assertEquals("admin-test-client", member.clientId());
            assertEquals(Set.of(tp0, tp1), member.assignment().topicPartitions());
            assertFalse(d.isSimpleConsumerGroup());

            // A non-empty group cannot be deleted or have its offsets altered.
            assertInstanceOf(GroupNotEmptyException.class, cause(admin.deleteConsumerGroups(List.of(group)).all()));
        }
        Map<TopicPartition, OffsetAndMetadata> offsets = get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
        assertEquals(Map.of(tp0, new OffsetAndMetadata(5), tp1, new OffsetAndMetadata(3)),
                offsets.entrySet().stream().collect(Collectors.toMap(Map.Entry::getKey,
                        e -> new OffsetAndMetadata(e.getValue().offset()))));

        get(admin.alterConsumerGroupOffsets(group, Map.of(tp0, new OffsetAndMetadata(1, "reset"))).all());
        assertEquals(1, get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()).get(tp0).offset());
        get(admin.deleteConsumerGroupOffsets(group, Set.of(tp1)).all());
        assertFalse(get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()).containsKey(tp1));

        ConsumerGroupDescription empty = get(admin.describeConsumerGroups(List.of(group)).all()).get(group);
        assertEquals(GroupState.EMPTY, empty.groupState());
        get(admin.deleteConsumerGroups(List.of(group)).all());
        assertInstanceOf(GroupIdNotFoundException.class, cause(admin.deleteConsumerGroups(List.of(group)).all()));
        assertTrue(get(admin.listGroups().all()).stream().noneMatch(g -> g.groupId().equals(group)));
    }

    /** One Admin operation and the API it needs. */
    private record Op(String name, ApiKeys api, Supplier<KafkaFuture<?>> call) {}

    private List<Op> notYetImplementedCandidates() {
        TopicPartition tp = new TopicPartition("admin-unsupported", 0);
        ResourcePattern pattern = new ResourcePattern(ResourceType.TOPIC, "t", PatternType.LITERAL);
        AccessControlEntry ace = new AccessControlEntry("User:a", "*", AclOperation.READ, AclPermissionType.ALLOW);
        return List.of(
                new Op("describeAcls", ApiKeys.DESCRIBE_ACLS, () -> admin.describeAcls(AclBindingFilter.ANY).values()),
                new Op("createAcls", ApiKeys.CREATE_ACLS, () -> admin.createAcls(List.of(new AclBinding(pattern, ace))).all()),
                new Op("deleteAcls", ApiKeys.DELETE_ACLS, () -> admin.deleteAcls(List.of(AclBindingFilter.ANY)).all()),
                new Op("electLeaders", ApiKeys.ELECT_LEADERS, () -> admin.electLeaders(ElectionType.PREFERRED, Set.of(tp)).all()),
                new Op("describeClientQuotas", ApiKeys.DESCRIBE_CLIENT_QUOTAS,
                        () -> admin.describeClientQuotas(ClientQuotaFilter.all()).entities()),
                new Op("describeUserScramCredentials", ApiKeys.DESCRIBE_USER_SCRAM_CREDENTIALS,
                        () -> admin.describeUserScramCredentials().all()),
                new Op("listPartitionReassignments", ApiKeys.LIST_PARTITION_REASSIGNMENTS,
                        () -> admin.listPartitionReassignments().reassignments()),
                new Op("alterPartitionReassignments", ApiKeys.ALTER_PARTITION_REASSIGNMENTS,
                        () -> admin.alterPartitionReassignments(Map.of(tp, Optional.of(new NewPartitionReassignment(List.of(1))))).all()),
                new Op("describeProducers", ApiKeys.DESCRIBE_PRODUCERS, () -> admin.describeProducers(List.of(tp)).all()),
                new Op("listTransactions", ApiKeys.LIST_TRANSACTIONS, () -> admin.listTransactions().all()),
                new Op("describeMetadataQuorum", ApiKeys.DESCRIBE_QUORUM, () -> admin.describeMetadataQuorum().quorumInfo()),
                new Op("describeDelegationToken", ApiKeys.DESCRIBE_DELEGATION_TOKEN,
                        () -> admin.describeDelegationToken().delegationTokens()),
                new Op("alterReplicaLogDirs", ApiKeys.ALTER_REPLICA_LOG_DIRS,
                        () -> admin.alterReplicaLogDirs(Map.of(new org.apache.kafka.common.TopicPartitionReplica("t", 0, 1), "/tmp")).all()));
    }

    /** Every Admin operation whose API Moldau does not advertise fails promptly with Kafka's
     *  UNSUPPORTED_VERSION; operations whose API it does advertise must not answer that. */
    @TestFactory
    Stream<DynamicTest> operationsWithoutTheirApiFailWithUnsupportedVersion() throws Exception {
        Map<Short, short[]> advertised = KafkaApis.advertised(bootstrap());
        // The operations address an existing partition (for one that does not exist, the Admin
        // client retries its Metadata lookup until the timeout, against Kafka too).
        createTopic("admin-unsupported", 1, Map.of());
        return notYetImplementedCandidates().stream().map(op -> DynamicTest.dynamicTest(op.name() + " (" + op.api() + ")", () -> {
            KafkaFuture<?> f = op.call().get();
            if (!advertised.containsKey(op.api().id)) {
                Throwable t = cause(f);
                assertInstanceOf(UnsupportedVersionException.class, t, op.name() + " -> " + t);
            } else {
                try {
                    f.get(60, TimeUnit.SECONDS);
                } catch (ExecutionException e) {
                    assertFalse(e.getCause() instanceof UnsupportedVersionException,
                            op.name() + " is advertised but answered " + e.getCause());
                }
            }
        }));
    }
}
