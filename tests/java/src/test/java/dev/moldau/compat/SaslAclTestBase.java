package dev.moldau.compat;

import java.util.HashSet;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;

/**
 * A broker on a SASL_PLAINTEXT listener with Kafka's StandardAuthorizer and PLAIN users admin (a
 * super user) and alice, fast KIP-848 heartbeats, and an {@link #admin} acting as admin. With
 * -Dcompat.bootstrap the tests run against a broker with the same users.
 */
abstract class SaslAclTestBase extends BrokerTestBase {
    private static final String JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required "
            + "username=\"%s\" password=\"%s\"%s;";

    @Override
    protected Map<String, String> brokerSettings() {
        Map<String, String> s = super.brokerSettings();
        s.put("listeners", "SASL_PLAINTEXT://127.0.0.1:0");
        s.put("sasl.enabled.mechanisms", "PLAIN");
        s.put("listener.name.sasl_plaintext.plain.sasl.jaas.config", String.format(JAAS, "admin", "admin-secret",
                " user_admin=\"admin-secret\" user_alice=\"alice-secret\""));
        s.put("authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer");
        s.put("super.users", "User:admin");
        s.put("group.consumer.min.heartbeat.interval.ms", "100");
        s.put("group.consumer.heartbeat.interval.ms", "500");
        return s;
    }

    protected static Map<String, Object> sasl(String user, String password) {
        return Map.of(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SASL_PLAINTEXT",
                SaslConfigs.SASL_MECHANISM, "PLAIN",
                SaslConfigs.SASL_JAAS_CONFIG, String.format(JAAS, user, password, ""));
    }

    /** An Admin acting as `user`. */
    protected Admin adminAs(String user, String password) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap());
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 15000);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30000);
        p.putAll(sasl(user, password));
        return Admin.create(p);
    }

    @Override
    protected Admin admin() {
        return adminAs("admin", "admin-secret");
    }

    /** Partitions 0..n of a topic. */
    protected static Set<TopicPartition> parts(String topic, int n) {
        Set<TopicPartition> out = new HashSet<>();
        for (int p = 0; p < n; p++) out.add(new TopicPartition(topic, p));
        return out;
    }

    /** alice may do `op` on the resource (LITERAL). */
    protected static AclBinding allow(ResourceType type, String name, AclOperation op) {
        return new AclBinding(new ResourcePattern(type, name, PatternType.LITERAL),
                new AccessControlEntry("User:alice", "*", op, AclPermissionType.ALLOW));
    }
}
