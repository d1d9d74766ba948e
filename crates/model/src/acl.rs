//! Kafka's ACL vocabulary as far as responses need it today: operation codes, resource types,
//! and the operations each resource type supports (what `*_authorized_operations` fields carry
//! when no authorizer is configured).

/// Kafka's `AclOperation` codes (stable on the wire; bit positions in authorized-operation
/// bitfields).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AclOperation {
    Read = 3,
    Write = 4,
    Create = 5,
    Delete = 6,
    Alter = 7,
    Describe = 8,
    ClusterAction = 9,
    DescribeConfigs = 10,
    AlterConfigs = 11,
    IdempotentWrite = 12,
    CreateTokens = 13,
    DescribeTokens = 14,
    TwoPhaseCommit = 15,
}

/// Kafka's concrete `ResourceType`s (the wire codes of config and ACL resources).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i8)]
pub enum ResourceType {
    Topic = 2,
    Group = 3,
    Cluster = 4,
    TransactionalId = 5,
    DelegationToken = 6,
    User = 7,
}

impl ResourceType {
    /// The operations ACLs can grant on this resource type (Kafka's
    /// `AclEntry.supportedOperations`).
    pub fn supported_operations(self) -> &'static [AclOperation] {
        use AclOperation::*;
        match self {
            ResourceType::Topic => &[
                Read,
                Write,
                Create,
                Describe,
                Delete,
                Alter,
                DescribeConfigs,
                AlterConfigs,
            ],
            ResourceType::Group => &[Read, Describe, Delete, DescribeConfigs, AlterConfigs],
            ResourceType::Cluster => &[
                Create,
                ClusterAction,
                DescribeConfigs,
                AlterConfigs,
                IdempotentWrite,
                Alter,
                Describe,
            ],
            ResourceType::TransactionalId => &[Describe, Write, TwoPhaseCommit],
            ResourceType::DelegationToken => &[Describe],
            ResourceType::User => &[CreateTokens, DescribeTokens],
        }
    }

    /// The authorized-operations bitfield (bit n set = operation code n allowed) a principal
    /// gets when no authorizer is configured: every supported operation, as Kafka answers.
    pub fn all_operations_bitfield(self) -> i32 {
        self.supported_operations()
            .iter()
            .fold(0, |bits, op| bits | (1 << *op as u8))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitfields_match_kafka_without_an_authorizer() {
        // The values Apache Kafka 4.x returns with no authorizer configured.
        assert_eq!(ResourceType::Topic.all_operations_bitfield(), 3576);
        assert_eq!(ResourceType::Cluster.all_operations_bitfield(), 8096);
        assert_eq!(ResourceType::Group.all_operations_bitfield(), 3400);
        assert_eq!(ResourceType::Topic.supported_operations().len(), 8);
        assert_eq!(ResourceType::Cluster.supported_operations().len(), 7);
    }
}
