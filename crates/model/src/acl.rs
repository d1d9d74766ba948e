//! Kafka's ACL vocabulary: operation codes, resource types, pattern and permission types
//! (their stable wire codes), and the operations each resource type supports (what
//! `*_authorized_operations` fields carry when no authorizer is configured).

/// Kafka's `AclOperation` codes (stable on the wire; bit positions in authorized-operation
/// bitfields).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum AclOperation {
    /// Matches every operation in an ACL (never requested by an action).
    All = 2,
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

impl AclOperation {
    /// The operation with this wire code (`UNKNOWN` = 0 and `ANY` = 1 are filter-only values
    /// and map to `None`; see [`OperationFilter`]).
    pub fn from_code(code: i8) -> Option<AclOperation> {
        use AclOperation::*;
        Some(match code {
            2 => All,
            3 => Read,
            4 => Write,
            5 => Create,
            6 => Delete,
            7 => Alter,
            8 => Describe,
            9 => ClusterAction,
            10 => DescribeConfigs,
            11 => AlterConfigs,
            12 => IdempotentWrite,
            13 => CreateTokens,
            14 => DescribeTokens,
            15 => TwoPhaseCommit,
            _ => return None,
        })
    }

    pub fn code(self) -> i8 {
        self as u8 as i8
    }

    /// Kafka's name (`AclOperation.toString()`), as kafka-acls prints it.
    pub fn name(self) -> &'static str {
        use AclOperation::*;
        match self {
            All => "ALL",
            Read => "READ",
            Write => "WRITE",
            Create => "CREATE",
            Delete => "DELETE",
            Alter => "ALTER",
            Describe => "DESCRIBE",
            ClusterAction => "CLUSTER_ACTION",
            DescribeConfigs => "DESCRIBE_CONFIGS",
            AlterConfigs => "ALTER_CONFIGS",
            IdempotentWrite => "IDEMPOTENT_WRITE",
            CreateTokens => "CREATE_TOKENS",
            DescribeTokens => "DESCRIBE_TOKENS",
            TwoPhaseCommit => "TWO_PHASE_COMMIT",
        }
    }

    /// Parses Kafka's name, case-insensitively (`-`, `_` and spaces ignored, so
    /// `describe-configs` and `DescribeConfigs` both work).
    pub fn parse(s: &str) -> Option<AclOperation> {
        let norm: String = s
            .chars()
            .filter(|c| !matches!(c, '_' | '-' | ' '))
            .collect::<String>()
            .to_ascii_uppercase();
        (2..=15)
            .filter_map(AclOperation::from_code)
            .find(|op| op.name().replace('_', "") == norm)
    }
}

/// Kafka's concrete `ResourceType`s (the wire codes of config and ACL resources).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
    pub fn from_code(code: i8) -> Option<ResourceType> {
        Some(match code {
            2 => ResourceType::Topic,
            3 => ResourceType::Group,
            4 => ResourceType::Cluster,
            5 => ResourceType::TransactionalId,
            6 => ResourceType::DelegationToken,
            7 => ResourceType::User,
            _ => return None,
        })
    }

    pub fn code(self) -> i8 {
        self as i8
    }

    /// Kafka's name (`ResourceType.toString()`).
    pub fn name(self) -> &'static str {
        match self {
            ResourceType::Topic => "TOPIC",
            ResourceType::Group => "GROUP",
            ResourceType::Cluster => "CLUSTER",
            ResourceType::TransactionalId => "TRANSACTIONAL_ID",
            ResourceType::DelegationToken => "DELEGATION_TOKEN",
            ResourceType::User => "USER",
        }
    }

    /// Parses Kafka's name case-insensitively (`-`/`_` ignored).
    pub fn parse(s: &str) -> Option<ResourceType> {
        let norm: String = s
            .chars()
            .filter(|c| !matches!(c, '_' | '-' | ' '))
            .collect::<String>()
            .to_ascii_uppercase();
        (2..=7)
            .filter_map(ResourceType::from_code)
            .find(|t| t.name().replace('_', "") == norm)
    }

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

/// How an ACL's resource name matches (Kafka's `PatternType`; LITERAL = 3, PREFIXED = 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i8)]
pub enum PatternType {
    /// The exact name, or every name when the name is `*`.
    Literal = 3,
    /// Every name starting with the pattern's name.
    Prefixed = 4,
}

impl PatternType {
    pub fn from_code(code: i8) -> Option<PatternType> {
        match code {
            3 => Some(PatternType::Literal),
            4 => Some(PatternType::Prefixed),
            _ => None,
        }
    }

    pub fn code(self) -> i8 {
        self as i8
    }

    pub fn name(self) -> &'static str {
        match self {
            PatternType::Literal => "LITERAL",
            PatternType::Prefixed => "PREFIXED",
        }
    }
}

/// Whether an ACL allows or denies (Kafka's `AclPermissionType`; DENY = 2, ALLOW = 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i8)]
pub enum PermissionType {
    Deny = 2,
    Allow = 3,
}

impl PermissionType {
    pub fn from_code(code: i8) -> Option<PermissionType> {
        match code {
            2 => Some(PermissionType::Deny),
            3 => Some(PermissionType::Allow),
            _ => None,
        }
    }

    pub fn code(self) -> i8 {
        self as i8
    }

    pub fn name(self) -> &'static str {
        match self {
            PermissionType::Deny => "DENY",
            PermissionType::Allow => "ALLOW",
        }
    }
}

/// Wire codes of the filter-only values (`UNKNOWN`, `ANY`, `MATCH`) shared by the enums above.
pub mod filter_codes {
    pub const UNKNOWN: i8 = 0;
    pub const ANY: i8 = 1;
    /// `PatternType.MATCH`: patterns that would match the filter's name.
    pub const MATCH: i8 = 2;
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

    #[test]
    fn names_and_codes_round_trip() {
        for code in 2..=15 {
            let op = AclOperation::from_code(code).expect("op");
            assert_eq!(op.code(), code);
            assert_eq!(AclOperation::parse(op.name()), Some(op));
        }
        assert_eq!(
            AclOperation::parse("describe-configs"),
            Some(AclOperation::DescribeConfigs)
        );
        assert_eq!(
            AclOperation::parse("IdempotentWrite"),
            Some(AclOperation::IdempotentWrite)
        );
        assert_eq!(AclOperation::from_code(1), None);
        for code in 2..=7 {
            let t = ResourceType::from_code(code).expect("type");
            assert_eq!(ResourceType::parse(t.name()), Some(t));
        }
        assert_eq!(
            ResourceType::parse("transactional-id"),
            Some(ResourceType::TransactionalId)
        );
    }
}
