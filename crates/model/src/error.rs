//! Kafka's wire error codes: one enum with Kafka's stable i16 values.

/// A Kafka protocol error code. The discriminant is the value sent on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i16)]
pub enum ErrorCode {
    UnknownServerError = -1,
    None = 0,
    OffsetOutOfRange = 1,
    CorruptMessage = 2,
    UnknownTopicOrPartition = 3,
    InvalidFetchSize = 4,
    LeaderNotAvailable = 5,
    NotLeaderOrFollower = 6,
    RequestTimedOut = 7,
    BrokerNotAvailable = 8,
    ReplicaNotAvailable = 9,
    MessageTooLarge = 10,
    StaleControllerEpoch = 11,
    OffsetMetadataTooLarge = 12,
    NetworkException = 13,
    CoordinatorLoadInProgress = 14,
    CoordinatorNotAvailable = 15,
    NotCoordinator = 16,
    InvalidTopicException = 17,
    RecordListTooLarge = 18,
    NotEnoughReplicas = 19,
    NotEnoughReplicasAfterAppend = 20,
    InvalidRequiredAcks = 21,
    IllegalGeneration = 22,
    InconsistentGroupProtocol = 23,
    InvalidGroupId = 24,
    UnknownMemberId = 25,
    InvalidSessionTimeout = 26,
    RebalanceInProgress = 27,
    InvalidCommitOffsetSize = 28,
    TopicAuthorizationFailed = 29,
    GroupAuthorizationFailed = 30,
    ClusterAuthorizationFailed = 31,
    InvalidTimestamp = 32,
    UnsupportedSaslMechanism = 33,
    IllegalSaslState = 34,
    UnsupportedVersion = 35,
    TopicAlreadyExists = 36,
    InvalidPartitions = 37,
    InvalidReplicationFactor = 38,
    InvalidReplicaAssignment = 39,
    InvalidConfig = 40,
    NotController = 41,
    InvalidRequest = 42,
    UnsupportedForMessageFormat = 43,
    PolicyViolation = 44,
    OutOfOrderSequenceNumber = 45,
    DuplicateSequenceNumber = 46,
    InvalidProducerEpoch = 47,
    InvalidTxnState = 48,
    InvalidProducerIdMapping = 49,
    InvalidTransactionTimeout = 50,
    ConcurrentTransactions = 51,
    TransactionCoordinatorFenced = 52,
    TransactionalIdAuthorizationFailed = 53,
    SecurityDisabled = 54,
    OperationNotAttempted = 55,
    KafkaStorageError = 56,
    LogDirNotFound = 57,
    SaslAuthenticationFailed = 58,
    UnknownProducerId = 59,
    ReassignmentInProgress = 60,
    DelegationTokenAuthDisabled = 61,
    DelegationTokenNotFound = 62,
    DelegationTokenOwnerMismatch = 63,
    DelegationTokenRequestNotAllowed = 64,
    DelegationTokenAuthorizationFailed = 65,
    DelegationTokenExpired = 66,
    InvalidPrincipalType = 67,
    NonEmptyGroup = 68,
    GroupIdNotFound = 69,
    FetchSessionIdNotFound = 70,
    InvalidFetchSessionEpoch = 71,
    ListenerNotFound = 72,
    TopicDeletionDisabled = 73,
    FencedLeaderEpoch = 74,
    UnknownLeaderEpoch = 75,
    UnsupportedCompressionType = 76,
    StaleBrokerEpoch = 77,
    OffsetNotAvailable = 78,
    MemberIdRequired = 79,
    PreferredLeaderNotAvailable = 80,
    GroupMaxSizeReached = 81,
    FencedInstanceId = 82,
    EligibleLeadersNotAvailable = 83,
    ElectionNotNeeded = 84,
    NoReassignmentInProgress = 85,
    GroupSubscribedToTopic = 86,
    InvalidRecord = 87,
    UnstableOffsetCommit = 88,
    ThrottlingQuotaExceeded = 89,
    ProducerFenced = 90,
    ResourceNotFound = 91,
    DuplicateResource = 92,
    UnacceptableCredential = 93,
    InconsistentVoterSet = 94,
    InvalidUpdateVersion = 95,
    FeatureUpdateFailed = 96,
    PrincipalDeserializationFailure = 97,
    SnapshotNotFound = 98,
    PositionOutOfRange = 99,
    UnknownTopicId = 100,
    DuplicateBrokerRegistration = 101,
    BrokerIdNotRegistered = 102,
    InconsistentTopicId = 103,
    InconsistentClusterId = 104,
    TransactionalIdNotFound = 105,
    FetchSessionTopicIdError = 106,
    IneligibleReplica = 107,
    NewLeaderElected = 108,
    OffsetMovedToTieredStorage = 109,
    FencedMemberEpoch = 110,
    UnreleasedInstanceId = 111,
    UnsupportedAssignor = 112,
    StaleMemberEpoch = 113,
    MismatchedEndpointType = 114,
    UnsupportedEndpointType = 115,
    UnknownControllerId = 116,
    UnknownSubscriptionId = 117,
    TelemetryTooLarge = 118,
    InvalidRegistration = 119,
    TransactionAbortable = 120,
}

impl ErrorCode {
    /// The value sent on the wire.
    pub fn code(self) -> i16 {
        self as i16
    }

    /// The code for a wire value; unknown values map to `UnknownServerError`.
    pub fn from_code(code: i16) -> ErrorCode {
        match code {
            -1 => ErrorCode::UnknownServerError,
            0 => ErrorCode::None,
            1 => ErrorCode::OffsetOutOfRange,
            2 => ErrorCode::CorruptMessage,
            3 => ErrorCode::UnknownTopicOrPartition,
            4 => ErrorCode::InvalidFetchSize,
            5 => ErrorCode::LeaderNotAvailable,
            6 => ErrorCode::NotLeaderOrFollower,
            7 => ErrorCode::RequestTimedOut,
            8 => ErrorCode::BrokerNotAvailable,
            9 => ErrorCode::ReplicaNotAvailable,
            10 => ErrorCode::MessageTooLarge,
            11 => ErrorCode::StaleControllerEpoch,
            12 => ErrorCode::OffsetMetadataTooLarge,
            13 => ErrorCode::NetworkException,
            14 => ErrorCode::CoordinatorLoadInProgress,
            15 => ErrorCode::CoordinatorNotAvailable,
            16 => ErrorCode::NotCoordinator,
            17 => ErrorCode::InvalidTopicException,
            18 => ErrorCode::RecordListTooLarge,
            19 => ErrorCode::NotEnoughReplicas,
            20 => ErrorCode::NotEnoughReplicasAfterAppend,
            21 => ErrorCode::InvalidRequiredAcks,
            22 => ErrorCode::IllegalGeneration,
            23 => ErrorCode::InconsistentGroupProtocol,
            24 => ErrorCode::InvalidGroupId,
            25 => ErrorCode::UnknownMemberId,
            26 => ErrorCode::InvalidSessionTimeout,
            27 => ErrorCode::RebalanceInProgress,
            28 => ErrorCode::InvalidCommitOffsetSize,
            29 => ErrorCode::TopicAuthorizationFailed,
            30 => ErrorCode::GroupAuthorizationFailed,
            31 => ErrorCode::ClusterAuthorizationFailed,
            32 => ErrorCode::InvalidTimestamp,
            33 => ErrorCode::UnsupportedSaslMechanism,
            34 => ErrorCode::IllegalSaslState,
            35 => ErrorCode::UnsupportedVersion,
            36 => ErrorCode::TopicAlreadyExists,
            37 => ErrorCode::InvalidPartitions,
            38 => ErrorCode::InvalidReplicationFactor,
            39 => ErrorCode::InvalidReplicaAssignment,
            40 => ErrorCode::InvalidConfig,
            41 => ErrorCode::NotController,
            42 => ErrorCode::InvalidRequest,
            43 => ErrorCode::UnsupportedForMessageFormat,
            44 => ErrorCode::PolicyViolation,
            45 => ErrorCode::OutOfOrderSequenceNumber,
            46 => ErrorCode::DuplicateSequenceNumber,
            47 => ErrorCode::InvalidProducerEpoch,
            48 => ErrorCode::InvalidTxnState,
            49 => ErrorCode::InvalidProducerIdMapping,
            50 => ErrorCode::InvalidTransactionTimeout,
            51 => ErrorCode::ConcurrentTransactions,
            52 => ErrorCode::TransactionCoordinatorFenced,
            53 => ErrorCode::TransactionalIdAuthorizationFailed,
            54 => ErrorCode::SecurityDisabled,
            55 => ErrorCode::OperationNotAttempted,
            56 => ErrorCode::KafkaStorageError,
            57 => ErrorCode::LogDirNotFound,
            58 => ErrorCode::SaslAuthenticationFailed,
            59 => ErrorCode::UnknownProducerId,
            60 => ErrorCode::ReassignmentInProgress,
            61 => ErrorCode::DelegationTokenAuthDisabled,
            62 => ErrorCode::DelegationTokenNotFound,
            63 => ErrorCode::DelegationTokenOwnerMismatch,
            64 => ErrorCode::DelegationTokenRequestNotAllowed,
            65 => ErrorCode::DelegationTokenAuthorizationFailed,
            66 => ErrorCode::DelegationTokenExpired,
            67 => ErrorCode::InvalidPrincipalType,
            68 => ErrorCode::NonEmptyGroup,
            69 => ErrorCode::GroupIdNotFound,
            70 => ErrorCode::FetchSessionIdNotFound,
            71 => ErrorCode::InvalidFetchSessionEpoch,
            72 => ErrorCode::ListenerNotFound,
            73 => ErrorCode::TopicDeletionDisabled,
            74 => ErrorCode::FencedLeaderEpoch,
            75 => ErrorCode::UnknownLeaderEpoch,
            76 => ErrorCode::UnsupportedCompressionType,
            77 => ErrorCode::StaleBrokerEpoch,
            78 => ErrorCode::OffsetNotAvailable,
            79 => ErrorCode::MemberIdRequired,
            80 => ErrorCode::PreferredLeaderNotAvailable,
            81 => ErrorCode::GroupMaxSizeReached,
            82 => ErrorCode::FencedInstanceId,
            83 => ErrorCode::EligibleLeadersNotAvailable,
            84 => ErrorCode::ElectionNotNeeded,
            85 => ErrorCode::NoReassignmentInProgress,
            86 => ErrorCode::GroupSubscribedToTopic,
            87 => ErrorCode::InvalidRecord,
            88 => ErrorCode::UnstableOffsetCommit,
            89 => ErrorCode::ThrottlingQuotaExceeded,
            90 => ErrorCode::ProducerFenced,
            91 => ErrorCode::ResourceNotFound,
            92 => ErrorCode::DuplicateResource,
            93 => ErrorCode::UnacceptableCredential,
            94 => ErrorCode::InconsistentVoterSet,
            95 => ErrorCode::InvalidUpdateVersion,
            96 => ErrorCode::FeatureUpdateFailed,
            97 => ErrorCode::PrincipalDeserializationFailure,
            98 => ErrorCode::SnapshotNotFound,
            99 => ErrorCode::PositionOutOfRange,
            100 => ErrorCode::UnknownTopicId,
            101 => ErrorCode::DuplicateBrokerRegistration,
            102 => ErrorCode::BrokerIdNotRegistered,
            103 => ErrorCode::InconsistentTopicId,
            104 => ErrorCode::InconsistentClusterId,
            105 => ErrorCode::TransactionalIdNotFound,
            106 => ErrorCode::FetchSessionTopicIdError,
            107 => ErrorCode::IneligibleReplica,
            108 => ErrorCode::NewLeaderElected,
            109 => ErrorCode::OffsetMovedToTieredStorage,
            110 => ErrorCode::FencedMemberEpoch,
            111 => ErrorCode::UnreleasedInstanceId,
            112 => ErrorCode::UnsupportedAssignor,
            113 => ErrorCode::StaleMemberEpoch,
            114 => ErrorCode::MismatchedEndpointType,
            115 => ErrorCode::UnsupportedEndpointType,
            116 => ErrorCode::UnknownControllerId,
            117 => ErrorCode::UnknownSubscriptionId,
            118 => ErrorCode::TelemetryTooLarge,
            119 => ErrorCode::InvalidRegistration,
            120 => ErrorCode::TransactionAbortable,
            _ => ErrorCode::UnknownServerError,
        }
    }

    /// Kafka's upper-snake-case name, e.g. `NOT_LEADER_OR_FOLLOWER`.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::UnknownServerError => "UNKNOWN_SERVER_ERROR",
            ErrorCode::None => "NONE",
            ErrorCode::OffsetOutOfRange => "OFFSET_OUT_OF_RANGE",
            ErrorCode::CorruptMessage => "CORRUPT_MESSAGE",
            ErrorCode::UnknownTopicOrPartition => "UNKNOWN_TOPIC_OR_PARTITION",
            ErrorCode::InvalidFetchSize => "INVALID_FETCH_SIZE",
            ErrorCode::LeaderNotAvailable => "LEADER_NOT_AVAILABLE",
            ErrorCode::NotLeaderOrFollower => "NOT_LEADER_OR_FOLLOWER",
            ErrorCode::RequestTimedOut => "REQUEST_TIMED_OUT",
            ErrorCode::BrokerNotAvailable => "BROKER_NOT_AVAILABLE",
            ErrorCode::ReplicaNotAvailable => "REPLICA_NOT_AVAILABLE",
            ErrorCode::MessageTooLarge => "MESSAGE_TOO_LARGE",
            ErrorCode::StaleControllerEpoch => "STALE_CONTROLLER_EPOCH",
            ErrorCode::OffsetMetadataTooLarge => "OFFSET_METADATA_TOO_LARGE",
            ErrorCode::NetworkException => "NETWORK_EXCEPTION",
            ErrorCode::CoordinatorLoadInProgress => "COORDINATOR_LOAD_IN_PROGRESS",
            ErrorCode::CoordinatorNotAvailable => "COORDINATOR_NOT_AVAILABLE",
            ErrorCode::NotCoordinator => "NOT_COORDINATOR",
            ErrorCode::InvalidTopicException => "INVALID_TOPIC_EXCEPTION",
            ErrorCode::RecordListTooLarge => "RECORD_LIST_TOO_LARGE",
            ErrorCode::NotEnoughReplicas => "NOT_ENOUGH_REPLICAS",
            ErrorCode::NotEnoughReplicasAfterAppend => "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
            ErrorCode::InvalidRequiredAcks => "INVALID_REQUIRED_ACKS",
            ErrorCode::IllegalGeneration => "ILLEGAL_GENERATION",
            ErrorCode::InconsistentGroupProtocol => "INCONSISTENT_GROUP_PROTOCOL",
            ErrorCode::InvalidGroupId => "INVALID_GROUP_ID",
            ErrorCode::UnknownMemberId => "UNKNOWN_MEMBER_ID",
            ErrorCode::InvalidSessionTimeout => "INVALID_SESSION_TIMEOUT",
            ErrorCode::RebalanceInProgress => "REBALANCE_IN_PROGRESS",
            ErrorCode::InvalidCommitOffsetSize => "INVALID_COMMIT_OFFSET_SIZE",
            ErrorCode::TopicAuthorizationFailed => "TOPIC_AUTHORIZATION_FAILED",
            ErrorCode::GroupAuthorizationFailed => "GROUP_AUTHORIZATION_FAILED",
            ErrorCode::ClusterAuthorizationFailed => "CLUSTER_AUTHORIZATION_FAILED",
            ErrorCode::InvalidTimestamp => "INVALID_TIMESTAMP",
            ErrorCode::UnsupportedSaslMechanism => "UNSUPPORTED_SASL_MECHANISM",
            ErrorCode::IllegalSaslState => "ILLEGAL_SASL_STATE",
            ErrorCode::UnsupportedVersion => "UNSUPPORTED_VERSION",
            ErrorCode::TopicAlreadyExists => "TOPIC_ALREADY_EXISTS",
            ErrorCode::InvalidPartitions => "INVALID_PARTITIONS",
            ErrorCode::InvalidReplicationFactor => "INVALID_REPLICATION_FACTOR",
            ErrorCode::InvalidReplicaAssignment => "INVALID_REPLICA_ASSIGNMENT",
            ErrorCode::InvalidConfig => "INVALID_CONFIG",
            ErrorCode::NotController => "NOT_CONTROLLER",
            ErrorCode::InvalidRequest => "INVALID_REQUEST",
            ErrorCode::UnsupportedForMessageFormat => "UNSUPPORTED_FOR_MESSAGE_FORMAT",
            ErrorCode::PolicyViolation => "POLICY_VIOLATION",
            ErrorCode::OutOfOrderSequenceNumber => "OUT_OF_ORDER_SEQUENCE_NUMBER",
            ErrorCode::DuplicateSequenceNumber => "DUPLICATE_SEQUENCE_NUMBER",
            ErrorCode::InvalidProducerEpoch => "INVALID_PRODUCER_EPOCH",
            ErrorCode::InvalidTxnState => "INVALID_TXN_STATE",
            ErrorCode::InvalidProducerIdMapping => "INVALID_PRODUCER_ID_MAPPING",
            ErrorCode::InvalidTransactionTimeout => "INVALID_TRANSACTION_TIMEOUT",
            ErrorCode::ConcurrentTransactions => "CONCURRENT_TRANSACTIONS",
            ErrorCode::TransactionCoordinatorFenced => "TRANSACTION_COORDINATOR_FENCED",
            ErrorCode::TransactionalIdAuthorizationFailed => {
                "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
            }
            ErrorCode::SecurityDisabled => "SECURITY_DISABLED",
            ErrorCode::OperationNotAttempted => "OPERATION_NOT_ATTEMPTED",
            ErrorCode::KafkaStorageError => "KAFKA_STORAGE_ERROR",
            ErrorCode::LogDirNotFound => "LOG_DIR_NOT_FOUND",
            ErrorCode::SaslAuthenticationFailed => "SASL_AUTHENTICATION_FAILED",
            ErrorCode::UnknownProducerId => "UNKNOWN_PRODUCER_ID",
            ErrorCode::ReassignmentInProgress => "REASSIGNMENT_IN_PROGRESS",
            ErrorCode::DelegationTokenAuthDisabled => "DELEGATION_TOKEN_AUTH_DISABLED",
            ErrorCode::DelegationTokenNotFound => "DELEGATION_TOKEN_NOT_FOUND",
            ErrorCode::DelegationTokenOwnerMismatch => "DELEGATION_TOKEN_OWNER_MISMATCH",
            ErrorCode::DelegationTokenRequestNotAllowed => "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED",
            ErrorCode::DelegationTokenAuthorizationFailed => {
                "DELEGATION_TOKEN_AUTHORIZATION_FAILED"
            }
            ErrorCode::DelegationTokenExpired => "DELEGATION_TOKEN_EXPIRED",
            ErrorCode::InvalidPrincipalType => "INVALID_PRINCIPAL_TYPE",
            ErrorCode::NonEmptyGroup => "NON_EMPTY_GROUP",
            ErrorCode::GroupIdNotFound => "GROUP_ID_NOT_FOUND",
            ErrorCode::FetchSessionIdNotFound => "FETCH_SESSION_ID_NOT_FOUND",
            ErrorCode::InvalidFetchSessionEpoch => "INVALID_FETCH_SESSION_EPOCH",
            ErrorCode::ListenerNotFound => "LISTENER_NOT_FOUND",
            ErrorCode::TopicDeletionDisabled => "TOPIC_DELETION_DISABLED",
            ErrorCode::FencedLeaderEpoch => "FENCED_LEADER_EPOCH",
            ErrorCode::UnknownLeaderEpoch => "UNKNOWN_LEADER_EPOCH",
            ErrorCode::UnsupportedCompressionType => "UNSUPPORTED_COMPRESSION_TYPE",
            ErrorCode::StaleBrokerEpoch => "STALE_BROKER_EPOCH",
            ErrorCode::OffsetNotAvailable => "OFFSET_NOT_AVAILABLE",
            ErrorCode::MemberIdRequired => "MEMBER_ID_REQUIRED",
            ErrorCode::PreferredLeaderNotAvailable => "PREFERRED_LEADER_NOT_AVAILABLE",
            ErrorCode::GroupMaxSizeReached => "GROUP_MAX_SIZE_REACHED",
            ErrorCode::FencedInstanceId => "FENCED_INSTANCE_ID",
            ErrorCode::EligibleLeadersNotAvailable => "ELIGIBLE_LEADERS_NOT_AVAILABLE",
            ErrorCode::ElectionNotNeeded => "ELECTION_NOT_NEEDED",
            ErrorCode::NoReassignmentInProgress => "NO_REASSIGNMENT_IN_PROGRESS",
            ErrorCode::GroupSubscribedToTopic => "GROUP_SUBSCRIBED_TO_TOPIC",
            ErrorCode::InvalidRecord => "INVALID_RECORD",
            ErrorCode::UnstableOffsetCommit => "UNSTABLE_OFFSET_COMMIT",
            ErrorCode::ThrottlingQuotaExceeded => "THROTTLING_QUOTA_EXCEEDED",
            ErrorCode::ProducerFenced => "PRODUCER_FENCED",
            ErrorCode::ResourceNotFound => "RESOURCE_NOT_FOUND",
            ErrorCode::DuplicateResource => "DUPLICATE_RESOURCE",
            ErrorCode::UnacceptableCredential => "UNACCEPTABLE_CREDENTIAL",
            ErrorCode::InconsistentVoterSet => "INCONSISTENT_VOTER_SET",
            ErrorCode::InvalidUpdateVersion => "INVALID_UPDATE_VERSION",
            ErrorCode::FeatureUpdateFailed => "FEATURE_UPDATE_FAILED",
            ErrorCode::PrincipalDeserializationFailure => "PRINCIPAL_DESERIALIZATION_FAILURE",
            ErrorCode::SnapshotNotFound => "SNAPSHOT_NOT_FOUND",
            ErrorCode::PositionOutOfRange => "POSITION_OUT_OF_RANGE",
            ErrorCode::UnknownTopicId => "UNKNOWN_TOPIC_ID",
            ErrorCode::DuplicateBrokerRegistration => "DUPLICATE_BROKER_REGISTRATION",
            ErrorCode::BrokerIdNotRegistered => "BROKER_ID_NOT_REGISTERED",
            ErrorCode::InconsistentTopicId => "INCONSISTENT_TOPIC_ID",
            ErrorCode::InconsistentClusterId => "INCONSISTENT_CLUSTER_ID",
            ErrorCode::TransactionalIdNotFound => "TRANSACTIONAL_ID_NOT_FOUND",
            ErrorCode::FetchSessionTopicIdError => "FETCH_SESSION_TOPIC_ID_ERROR",
            ErrorCode::IneligibleReplica => "INELIGIBLE_REPLICA",
            ErrorCode::NewLeaderElected => "NEW_LEADER_ELECTED",
            ErrorCode::OffsetMovedToTieredStorage => "OFFSET_MOVED_TO_TIERED_STORAGE",
            ErrorCode::FencedMemberEpoch => "FENCED_MEMBER_EPOCH",
            ErrorCode::UnreleasedInstanceId => "UNRELEASED_INSTANCE_ID",
            ErrorCode::UnsupportedAssignor => "UNSUPPORTED_ASSIGNOR",
            ErrorCode::StaleMemberEpoch => "STALE_MEMBER_EPOCH",
            ErrorCode::MismatchedEndpointType => "MISMATCHED_ENDPOINT_TYPE",
            ErrorCode::UnsupportedEndpointType => "UNSUPPORTED_ENDPOINT_TYPE",
            ErrorCode::UnknownControllerId => "UNKNOWN_CONTROLLER_ID",
            ErrorCode::UnknownSubscriptionId => "UNKNOWN_SUBSCRIPTION_ID",
            ErrorCode::TelemetryTooLarge => "TELEMETRY_TOO_LARGE",
            ErrorCode::InvalidRegistration => "INVALID_REGISTRATION",
            ErrorCode::TransactionAbortable => "TRANSACTION_ABORTABLE",
        }
    }

    /// Whether a client may retry the request unchanged (Kafka's `RetriableException`).
    pub fn is_retriable(self) -> bool {
        matches!(
            self,
            ErrorCode::CorruptMessage
                | ErrorCode::UnknownTopicOrPartition
                | ErrorCode::LeaderNotAvailable
                | ErrorCode::NotLeaderOrFollower
                | ErrorCode::RequestTimedOut
                | ErrorCode::ReplicaNotAvailable
                | ErrorCode::NetworkException
                | ErrorCode::CoordinatorLoadInProgress
                | ErrorCode::CoordinatorNotAvailable
                | ErrorCode::NotCoordinator
                | ErrorCode::NotEnoughReplicas
                | ErrorCode::NotEnoughReplicasAfterAppend
                | ErrorCode::NotController
                | ErrorCode::ConcurrentTransactions
                | ErrorCode::KafkaStorageError
                | ErrorCode::FetchSessionIdNotFound
                | ErrorCode::InvalidFetchSessionEpoch
                | ErrorCode::ListenerNotFound
                | ErrorCode::FencedLeaderEpoch
                | ErrorCode::UnknownLeaderEpoch
                | ErrorCode::OffsetNotAvailable
                | ErrorCode::PreferredLeaderNotAvailable
                | ErrorCode::EligibleLeadersNotAvailable
                | ErrorCode::ElectionNotNeeded
                | ErrorCode::UnstableOffsetCommit
                | ErrorCode::ThrottlingQuotaExceeded
                | ErrorCode::UnknownTopicId
                | ErrorCode::InconsistentTopicId
                | ErrorCode::FetchSessionTopicIdError
        )
    }

    pub fn is_ok(self) -> bool {
        self == ErrorCode::None
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for code in -1..=120 {
            assert_eq!(ErrorCode::from_code(code).code(), code);
        }
        assert_eq!(ErrorCode::from_code(9999), ErrorCode::UnknownServerError);
        assert_eq!(ErrorCode::NotLeaderOrFollower.code(), 6);
        assert!(ErrorCode::NotLeaderOrFollower.is_retriable());
        assert!(!ErrorCode::MessageTooLarge.is_retriable());
    }
}
