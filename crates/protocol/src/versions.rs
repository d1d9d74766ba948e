//! The APIs and versions Moldau implements: exactly what ApiVersions advertises, and the gate
//! every request passes before it is decoded.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};

/// (api, min version, max version) for every API the broker answers. Ranges follow what
/// Kafka 4.x and the `kafka-protocol` crate support; a version is listed only when its
/// handler fills every field that version has.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 17),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::ApiVersions, 0, 4),
    // Advertised on every listener, as Kafka does; a listener without SASL answers them
    // ILLEGAL_SASL_STATE.
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::InitProducerId, 0, 5),
    // Transactions. EndTxn v5, TxnOffsetCommit v5 and Produce v12 in a transaction are
    // transaction version 2 (KIP-890 part 2: the epoch is bumped per transaction, leaders add
    // partitions on the producer's behalf); clients use them when ApiVersions finalizes the
    // `transaction.version` feature at 2 (`with_features`), others stay on version 1.
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::WriteTxnMarkers, 1, 1),
    (ApiKey::TxnOffsetCommit, 0, 5),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 2),
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::DescribeTopicPartitions, 0, 0),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
];

/// What a CONTROLLER listener serves (Kafka's controller APIs: broker registration and
/// heartbeats, producer-id blocks, the quorum's description, and the administration requests
/// brokers forward). Raft traffic between voters and observers' metadata fetches use private
/// api keys outside Kafka's range, handled before this table is consulted.
pub const CONTROLLER_SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::Envelope, 0, 0),
    (ApiKey::BrokerRegistration, 0, 4),
    (ApiKey::BrokerHeartbeat, 0, 1),
    (ApiKey::AllocateProducerIds, 0, 0),
    (ApiKey::AlterPartition, 2, 3),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::AlterClientQuotas, 0, 1),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
];

/// Whether requests of `api` at `version` are served.
pub fn is_supported(api: ApiKey, version: i16) -> bool {
    is_supported_in(SUPPORTED, api, version)
}

/// Whether `table` serves `api` at `version`.
pub fn is_supported_in(table: &[(ApiKey, i16, i16)], api: ApiKey, version: i16) -> bool {
    table
        .iter()
        .any(|&(a, min, max)| a == api && (min..=max).contains(&version))
}

/// The supported range of `api`, if served.
pub fn range(api: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(a, _, _)| *a == api)
        .map(|&(_, min, max)| (min, max))
}

/// An ApiVersions response body listing `SUPPORTED`, with the given error code. Optional
/// tagged fields stay at their defaults so they are not encoded (kcat 1.7 rejects them).
pub fn api_versions_response(error_code: i16) -> ApiVersionsResponse {
    api_versions_response_for(SUPPORTED, error_code)
}

/// An ApiVersions response body listing `table`.
pub fn api_versions_response_for(
    table: &[(ApiKey, i16, i16)],
    error_code: i16,
) -> ApiVersionsResponse {
    let mut keys: Vec<ApiVersion> = table
        .iter()
        .map(|&(api, min, max)| {
            ApiVersion::default()
                .with_api_key(api as i16)
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect();
    keys.sort_by_key(|k| k.api_key);
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(keys)
}

/// Kafka's `transaction.version` feature: the highest level Moldau supports, and the level
/// it finalizes (2: KIP-890 part 2, as a new Kafka 4.x cluster).
pub const TRANSACTION_VERSION_FEATURE: &str = "transaction.version";
pub const TRANSACTION_VERSION: i16 = 2;

/// Adds the features Moldau supports and finalizes to a broker's ApiVersions answer (tagged
/// fields of v3+): `transaction.version` 0-2, finalized at 2, with `finalized_epoch` (Kafka
/// gives the metadata offset the features were read at; clients keep the answer with the
/// highest epoch). The Java client uses transaction version 2 only when it sees it here.
pub fn with_features(resp: ApiVersionsResponse, finalized_epoch: i64) -> ApiVersionsResponse {
    use kafka_protocol::messages::api_versions_response::{
        FinalizedFeatureKey, SupportedFeatureKey,
    };
    use kafka_protocol::protocol::StrBytes;
    let name = || StrBytes::from_static_str(TRANSACTION_VERSION_FEATURE);
    resp.with_supported_features(vec![SupportedFeatureKey::default()
        .with_name(name())
        .with_min_version(0)
        .with_max_version(TRANSACTION_VERSION)])
        .with_finalized_features_epoch(finalized_epoch.max(0))
        .with_finalized_features(vec![FinalizedFeatureKey::default()
            .with_name(name())
            .with_min_version_level(TRANSACTION_VERSION)
            .with_max_version_level(TRANSACTION_VERSION)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_within_what_the_codec_supports() {
        for &(api, min, max) in SUPPORTED.iter().chain(CONTROLLER_SUPPORTED) {
            let r = api.valid_versions();
            assert!(min >= r.min && max <= r.max && min <= max, "{api:?}");
        }
        assert!(is_supported(ApiKey::ApiVersions, 3));
        assert!(!is_supported(ApiKey::ApiVersions, 5));
    }
}
