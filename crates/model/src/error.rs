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
    InvalidRecordState = 121,
    ShareSessionNotFound = 122,
    InvalidShareSessionEpoch = 123,
    FencedStateEpoch = 124,
    InvalidVoterKey = 125,
    DuplicateVoter = 126,
    VoterNotFound = 127,
    InvalidRegularExpression = 128,
    RebootstrapRequired = 129,
    StreamsInvalidTopology = 130,
    StreamsInvalidTopologyEpoch = 131,
    StreamsTopologyFenced = 132,
    ShareSessionLimitReached = 133,
    GroupDeletionFailed = 134,
    StreamsTopologyDescriptionUpdateFailed = 135,
    ControllerIdNotRegistered = 136,
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
            121 => ErrorCode::InvalidRecordState,
            122 => ErrorCode::ShareSessionNotFound,
            123 => ErrorCode::InvalidShareSessionEpoch,
            124 => ErrorCode::FencedStateEpoch,
            125 => ErrorCode::InvalidVoterKey,
            126 => ErrorCode::DuplicateVoter,
            127 => ErrorCode::VoterNotFound,
            128 => ErrorCode::InvalidRegularExpression,
            129 => ErrorCode::RebootstrapRequired,
            130 => ErrorCode::StreamsInvalidTopology,
            131 => ErrorCode::StreamsInvalidTopologyEpoch,
            132 => ErrorCode::StreamsTopologyFenced,
            133 => ErrorCode::ShareSessionLimitReached,
            134 => ErrorCode::GroupDeletionFailed,
            135 => ErrorCode::StreamsTopologyDescriptionUpdateFailed,
            136 => ErrorCode::ControllerIdNotRegistered,
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
            ErrorCode::InvalidRecordState => "INVALID_RECORD_STATE",
            ErrorCode::ShareSessionNotFound => "SHARE_SESSION_NOT_FOUND",
            ErrorCode::InvalidShareSessionEpoch => "INVALID_SHARE_SESSION_EPOCH",
            ErrorCode::FencedStateEpoch => "FENCED_STATE_EPOCH",
            ErrorCode::InvalidVoterKey => "INVALID_VOTER_KEY",
            ErrorCode::DuplicateVoter => "DUPLICATE_VOTER",
            ErrorCode::VoterNotFound => "VOTER_NOT_FOUND",
            ErrorCode::InvalidRegularExpression => "INVALID_REGULAR_EXPRESSION",
            ErrorCode::RebootstrapRequired => "REBOOTSTRAP_REQUIRED",
            ErrorCode::StreamsInvalidTopology => "STREAMS_INVALID_TOPOLOGY",
            ErrorCode::StreamsInvalidTopologyEpoch => "STREAMS_INVALID_TOPOLOGY_EPOCH",
            ErrorCode::StreamsTopologyFenced => "STREAMS_TOPOLOGY_FENCED",
            ErrorCode::ShareSessionLimitReached => "SHARE_SESSION_LIMIT_REACHED",
            ErrorCode::GroupDeletionFailed => "GROUP_DELETION_FAILED",
            ErrorCode::StreamsTopologyDescriptionUpdateFailed => {
                "STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED"
            }
            ErrorCode::ControllerIdNotRegistered => "CONTROLLER_ID_NOT_REGISTERED",
        }
    }

    /// Kafka's default text for the error (its `Errors.message()`: the message of the
    /// exception the code stands for; `"NONE"` for no error), as Apache Kafka 4.4 has them.
    /// Kafka puts it in a response's error message where it answers the error without
    /// naming the problem further (e.g. DescribeProducers for an unknown topic, FindCoordinator
    /// v1-v3); clients show it for an error that came without a message.
    pub fn default_message(self) -> &'static str {
        match self {
            ErrorCode::UnknownServerError => "The server experienced an unexpected error when processing the request.",
            ErrorCode::None => "NONE",
            ErrorCode::OffsetOutOfRange => "The requested offset is not within the range of offsets maintained by the server.",
            ErrorCode::CorruptMessage => "This message has failed its CRC checksum, exceeds the valid size, has a null key for a compacted topic, or is otherwise corrupt.",
            ErrorCode::UnknownTopicOrPartition => "This server does not host this topic-partition.",
            ErrorCode::InvalidFetchSize => "The requested fetch size is invalid.",
            ErrorCode::LeaderNotAvailable => "There is no leader for this topic-partition as we are in the middle of a leadership election.",
            ErrorCode::NotLeaderOrFollower => "For requests intended only for the leader, this error indicates that the broker is not the current leader. For requests intended for any replica, this error indicates that the broker is not a replica of the topic partition.",
            ErrorCode::RequestTimedOut => "The request timed out.",
            ErrorCode::BrokerNotAvailable => "The broker is not available.",
            ErrorCode::ReplicaNotAvailable => "The replica is not available for the requested topic-partition. Produce/Fetch requests and other requests intended only for the leader or follower return NOT_LEADER_OR_FOLLOWER if the broker is not a replica of the topic-partition.",
            ErrorCode::MessageTooLarge => "The request included a message larger than the max message size the server will accept.",
            ErrorCode::StaleControllerEpoch => "The controller moved to another broker.",
            ErrorCode::OffsetMetadataTooLarge => "The metadata field of the offset request was too large.",
            ErrorCode::NetworkException => "The server disconnected before a response was received.",
            ErrorCode::CoordinatorLoadInProgress => "The coordinator is loading and hence can't process requests.",
            ErrorCode::CoordinatorNotAvailable => "The coordinator is not available.",
            ErrorCode::NotCoordinator => "This is not the correct coordinator.",
            ErrorCode::InvalidTopicException => "The request attempted to perform an operation on an invalid topic.",
            ErrorCode::RecordListTooLarge => "The request included message batch larger than the configured segment size on the server.",
            ErrorCode::NotEnoughReplicas => "Messages are rejected since there are fewer in-sync replicas than required.",
            ErrorCode::NotEnoughReplicasAfterAppend => "Messages are written to the log, but to fewer in-sync replicas than required.",
            ErrorCode::InvalidRequiredAcks => "Produce request specified an invalid value for required acks.",
            ErrorCode::IllegalGeneration => "Specified group generation id is not valid.",
            ErrorCode::InconsistentGroupProtocol => "The group member's supported protocols are incompatible with those of existing members or first group member tried to join with empty protocol type or empty protocol list.",
            ErrorCode::InvalidGroupId => "The group id is invalid.",
            ErrorCode::UnknownMemberId => "The coordinator is not aware of this member.",
            ErrorCode::InvalidSessionTimeout => "The session timeout is not within the range allowed by the broker (as configured by group.min.session.timeout.ms and group.max.session.timeout.ms).",
            ErrorCode::RebalanceInProgress => "The group is rebalancing, so a rejoin is needed.",
            ErrorCode::InvalidCommitOffsetSize => "The committing offset data size is not valid.",
            ErrorCode::TopicAuthorizationFailed => "Topic authorization failed.",
            ErrorCode::GroupAuthorizationFailed => "Group authorization failed.",
            ErrorCode::ClusterAuthorizationFailed => "Cluster authorization failed.",
            ErrorCode::InvalidTimestamp => "The timestamp of the message is out of acceptable range.",
            ErrorCode::UnsupportedSaslMechanism => "The broker does not support the requested SASL mechanism.",
            ErrorCode::IllegalSaslState => "Request is not valid given the current SASL state.",
            ErrorCode::UnsupportedVersion => "The version of API is not supported.",
            ErrorCode::TopicAlreadyExists => "Topic with this name already exists.",
            ErrorCode::InvalidPartitions => "Number of partitions is below 1.",
            ErrorCode::InvalidReplicationFactor => "Replication factor is below 1 or larger than the number of available brokers.",
            ErrorCode::InvalidReplicaAssignment => "Replica assignment is invalid.",
            ErrorCode::InvalidConfig => "Configuration is invalid.",
            ErrorCode::NotController => "This is not the correct controller for this cluster.",
            ErrorCode::InvalidRequest => "This most likely occurs because of a request being malformed by the client library or the message was sent to an incompatible broker. See the broker logs for more details.",
            ErrorCode::UnsupportedForMessageFormat => "The message format version on the broker does not support the request.",
            ErrorCode::PolicyViolation => "Request parameters do not satisfy the configured policy.",
            ErrorCode::OutOfOrderSequenceNumber => "The broker received an out of order sequence number.",
            ErrorCode::DuplicateSequenceNumber => "The broker received a duplicate sequence number.",
            ErrorCode::InvalidProducerEpoch => "Producer attempted to produce with an old epoch.",
            ErrorCode::InvalidTxnState => "The producer attempted a transactional operation in an invalid state.",
            ErrorCode::InvalidProducerIdMapping => "The producer attempted to use a producer id which is not currently assigned to its transactional id.",
            ErrorCode::InvalidTransactionTimeout => "The transaction timeout is larger than the maximum value allowed by the broker (as configured by transaction.max.timeout.ms).",
            ErrorCode::ConcurrentTransactions => "The producer attempted to update a transaction while another concurrent operation on the same transaction was ongoing.",
            ErrorCode::TransactionCoordinatorFenced => "Indicates that the transaction coordinator sending a WriteTxnMarker is no longer the current coordinator for a given producer.",
            ErrorCode::TransactionalIdAuthorizationFailed => "Transactional Id authorization failed.",
            ErrorCode::SecurityDisabled => "Security features are disabled.",
            ErrorCode::OperationNotAttempted => "The broker did not attempt to execute this operation. This may happen for batched RPCs where some operations in the batch failed, causing the broker to respond without trying the rest.",
            ErrorCode::KafkaStorageError => "Disk error when trying to access log file on the disk.",
            ErrorCode::LogDirNotFound => "The user-specified log directory is not found in the broker config.",
            ErrorCode::SaslAuthenticationFailed => "SASL Authentication failed.",
            ErrorCode::UnknownProducerId => "This exception is raised by the broker if it could not locate the producer metadata associated with the producerId in question. This could happen if, for instance, the producer's records were deleted because their retention time had elapsed. Once the last records of the producerId are removed, the producer's metadata is removed from the broker, and future appends by the producer will return this exception.",
            ErrorCode::ReassignmentInProgress => "A partition reassignment is in progress.",
            ErrorCode::DelegationTokenAuthDisabled => "Delegation Token feature is not enabled.",
            ErrorCode::DelegationTokenNotFound => "Delegation Token is not found on server.",
            ErrorCode::DelegationTokenOwnerMismatch => "Specified Principal is not valid Owner/Renewer.",
            ErrorCode::DelegationTokenRequestNotAllowed => "Delegation Token requests are not allowed on PLAINTEXT/1-way SSL channels and on delegation token authenticated channels.",
            ErrorCode::DelegationTokenAuthorizationFailed => "Delegation Token authorization failed.",
            ErrorCode::DelegationTokenExpired => "Delegation Token is expired.",
            ErrorCode::InvalidPrincipalType => "Supplied principalType is not supported.",
            ErrorCode::NonEmptyGroup => "The group is not empty.",
            ErrorCode::GroupIdNotFound => "The group id does not exist.",
            ErrorCode::FetchSessionIdNotFound => "The fetch session ID was not found.",
            ErrorCode::InvalidFetchSessionEpoch => "The fetch session epoch is invalid.",
            ErrorCode::ListenerNotFound => "There is no listener on the leader broker that matches the listener on which metadata request was processed.",
            ErrorCode::TopicDeletionDisabled => "Topic deletion is disabled.",
            ErrorCode::FencedLeaderEpoch => "The leader epoch in the request is older than the epoch on the broker.",
            ErrorCode::UnknownLeaderEpoch => "The leader epoch in the request is newer than the epoch on the broker.",
            ErrorCode::UnsupportedCompressionType => "The requesting client does not support the compression type of given partition.",
            ErrorCode::StaleBrokerEpoch => "Broker epoch has changed.",
            ErrorCode::OffsetNotAvailable => "The leader high watermark has not caught up from a recent leader election so the offsets cannot be guaranteed to be monotonically increasing.",
            ErrorCode::MemberIdRequired => "The group member needs to have a valid member id before actually entering a consumer group.",
            ErrorCode::PreferredLeaderNotAvailable => "The preferred leader was not available.",
            ErrorCode::GroupMaxSizeReached => "The group has reached its maximum size.",
            ErrorCode::FencedInstanceId => "The broker rejected this static consumer since another consumer with the same group.instance.id has registered with a different member.id.",
            ErrorCode::EligibleLeadersNotAvailable => "Eligible topic partition leaders are not available.",
            ErrorCode::ElectionNotNeeded => "Leader election not needed for topic partition.",
            ErrorCode::NoReassignmentInProgress => "No partition reassignment is in progress.",
            ErrorCode::GroupSubscribedToTopic => "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it.",
            ErrorCode::InvalidRecord => "This record has failed the validation on broker and hence will be rejected.",
            ErrorCode::UnstableOffsetCommit => "There are unstable offsets that need to be cleared.",
            ErrorCode::ThrottlingQuotaExceeded => "The throttling quota has been exceeded.",
            ErrorCode::ProducerFenced => "There is a newer producer with the same transactionalId which fences the current one.",
            ErrorCode::ResourceNotFound => "A request illegally referred to a resource that does not exist.",
            ErrorCode::DuplicateResource => "A request illegally referred to the same resource twice.",
            ErrorCode::UnacceptableCredential => "Requested credential would not meet criteria for acceptability.",
            ErrorCode::InconsistentVoterSet => "Indicates that the either the sender or recipient of a voter-only request is not one of the expected voters.",
            ErrorCode::InvalidUpdateVersion => "The given update version was invalid.",
            ErrorCode::FeatureUpdateFailed => "Unable to update finalized features due to an unexpected server error.",
            ErrorCode::PrincipalDeserializationFailure => "Request principal deserialization failed during forwarding. This indicates an internal error on the broker cluster security setup.",
            ErrorCode::SnapshotNotFound => "Requested snapshot was not found.",
            ErrorCode::PositionOutOfRange => "Requested position is not greater than or equal to zero, and less than the size of the snapshot.",
            ErrorCode::UnknownTopicId => "This server does not host this topic ID.",
            ErrorCode::DuplicateBrokerRegistration => "This broker ID is already in use.",
            ErrorCode::BrokerIdNotRegistered => "The given broker ID was not registered.",
            ErrorCode::InconsistentTopicId => "The log's topic ID did not match the topic ID in the request.",
            ErrorCode::InconsistentClusterId => "The clusterId in the request does not match that found on the server.",
            ErrorCode::TransactionalIdNotFound => "The transactionalId could not be found.",
            ErrorCode::FetchSessionTopicIdError => "The fetch session encountered inconsistent topic ID usage.",
            ErrorCode::IneligibleReplica => "The new ISR contains at least one ineligible replica.",
            ErrorCode::NewLeaderElected => "The AlterPartition request successfully updated the partition state but the leader has changed.",
            ErrorCode::OffsetMovedToTieredStorage => "The requested offset is moved to tiered storage.",
            ErrorCode::FencedMemberEpoch => "The member epoch is fenced by the group coordinator. The member must abandon all its partitions and rejoin.",
            ErrorCode::UnreleasedInstanceId => "The instance ID is still used by another member in the consumer group. That member must leave first.",
            ErrorCode::UnsupportedAssignor => "The assignor or its version range is not supported by the consumer group.",
            ErrorCode::StaleMemberEpoch => "The member epoch is stale. The member must retry after receiving its updated member epoch via the ConsumerGroupHeartbeat API.",
            ErrorCode::MismatchedEndpointType => "The request was sent to an endpoint of the wrong type.",
            ErrorCode::UnsupportedEndpointType => "This endpoint type is not supported yet.",
            ErrorCode::UnknownControllerId => "This controller ID is not known.",
            ErrorCode::UnknownSubscriptionId => "Client sent a push telemetry request with an invalid or outdated subscription ID.",
            ErrorCode::TelemetryTooLarge => "Client sent a push telemetry request larger than the maximum size the broker will accept.",
            ErrorCode::InvalidRegistration => "The controller has considered the broker registration to be invalid.",
            ErrorCode::TransactionAbortable => "The server encountered an error with the transaction. The client can abort the transaction to continue using this transactional ID.",
            ErrorCode::InvalidRecordState => "The record state is invalid. The acknowledgement of delivery could not be completed.",
            ErrorCode::ShareSessionNotFound => "The share session was not found.",
            ErrorCode::InvalidShareSessionEpoch => "The share session epoch is invalid.",
            ErrorCode::FencedStateEpoch => "The coordinator rejected the request because the state epoch did not match.",
            ErrorCode::InvalidVoterKey => "The voter key doesn't match the receiving replica's key.",
            ErrorCode::DuplicateVoter => "The voter is already part of the set of voters.",
            ErrorCode::VoterNotFound => "The voter is not part of the set of voters.",
            ErrorCode::InvalidRegularExpression => "The regular expression is not valid.",
            ErrorCode::RebootstrapRequired => {
                "Client metadata is stale. The client should rebootstrap to obtain new metadata."
            }
            ErrorCode::StreamsInvalidTopology => "The supplied topology is invalid.",
            ErrorCode::StreamsInvalidTopologyEpoch => "The supplied topology epoch is invalid.",
            ErrorCode::StreamsTopologyFenced => "The supplied topology epoch is outdated.",
            ErrorCode::ShareSessionLimitReached => "The limit of share sessions has been reached.",
            ErrorCode::GroupDeletionFailed => {
                "DeleteGroups could not complete; see the error message on the per-group result for details."
            }
            ErrorCode::StreamsTopologyDescriptionUpdateFailed => {
                "The broker could not process the topology description update; see the error message for details."
            }
            ErrorCode::ControllerIdNotRegistered => "The given controller ID was not registered.",
        }
    }

    /// The message a response carries for this error raised with `message` where Kafka
    /// answers through its `ApiError.fromThrowable`: none for UNKNOWN_SERVER_ERROR (Kafka
    /// leaks no server detail), for an empty message and for one that is only the error's
    /// default text; else the message. Raise an error Kafka answers without naming the
    /// problem with its default text (`default_message`), and it goes out as null.
    pub fn api_message(self, message: &str) -> Option<&str> {
        let bare = self == ErrorCode::UnknownServerError
            || message.is_empty()
            || message == self.default_message();
        (!bare).then_some(message)
    }

    /// The message, or the error's default text where there is none (Kafka's
    /// `ApiError.messageWithFallback`, as ElectLeaders answers).
    pub fn message_or_default(self, message: &str) -> &str {
        if message.is_empty() {
            self.default_message()
        } else {
            message
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
                | ErrorCode::ShareSessionNotFound
                | ErrorCode::InvalidShareSessionEpoch
                | ErrorCode::ShareSessionLimitReached
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
        for code in -1..=136 {
            assert_eq!(ErrorCode::from_code(code).code(), code);
        }
        assert_eq!(ErrorCode::from_code(9999), ErrorCode::UnknownServerError);
        assert_eq!(ErrorCode::NotLeaderOrFollower.code(), 6);
        assert!(ErrorCode::NotLeaderOrFollower.is_retriable());
        assert!(!ErrorCode::MessageTooLarge.is_retriable());
    }

    #[test]
    fn default_messages_are_kafkas() {
        assert_eq!(ErrorCode::None.default_message(), "NONE");
        assert_eq!(
            ErrorCode::UnknownTopicOrPartition.default_message(),
            "This server does not host this topic-partition."
        );
        assert_eq!(
            ErrorCode::UnknownServerError.default_message(),
            "The server experienced an unexpected error when processing the request."
        );
        // ApiError.fromThrowable's rule: the default text and UNKNOWN_SERVER_ERROR go out bare.
        let e = ErrorCode::RequestTimedOut;
        assert_eq!(e.api_message(e.default_message()), None);
        assert_eq!(e.api_message(""), None);
        assert_eq!(e.api_message("Topic t is gone."), Some("Topic t is gone."));
        assert_eq!(ErrorCode::UnknownServerError.api_message("a panic"), None);
        let e = ErrorCode::ElectionNotNeeded;
        assert_eq!(
            e.message_or_default(""),
            "Leader election not needed for topic partition."
        );
        assert_eq!(e.message_or_default("x"), "x");
        // Every code has text of its own (none falls back to another's).
        for code in -1..=136 {
            let e = ErrorCode::from_code(code);
            assert!(!e.default_message().is_empty(), "{e}");
        }
    }
}
