//! Request/response pairing and the API versions this client fills correctly.
//!
//! Each request type names its API key, its response type and the version range whose fields
//! the client sets correctly (`kafka-protocol` refuses to encode a field the version lacks, and
//! some newer versions address topics by id, which this client does not). The version used on
//! a connection is the highest one both this table and the broker's ApiVersions allow.

use bytes::{BufMut, Bytes, BytesMut};
use protocol::messages::*;
use protocol::{ApiKey, Decode, Encode, RequestHeader, ResponseHeader, StrBytes};

use crate::error::Error;

/// A request type with its API key, response type and the versions the client fills.
pub trait Rpc: Encode + std::fmt::Debug + Send + Sync + 'static {
    const KEY: ApiKey;
    const MIN: i16;
    const MAX: i16;
    type Response: Decode + Encode + Default + std::fmt::Debug + Send + 'static;
}

macro_rules! rpc {
    ($req:ty => $resp:ty, $key:ident, $min:expr, $max:expr) => {
        impl Rpc for $req {
            const KEY: ApiKey = ApiKey::$key;
            const MIN: i16 = $min;
            const MAX: i16 = $max;
            type Response = $resp;
        }
    };
}

// Caps: Produce <= 11 and Fetch <= 12 address topics by name (13+ use topic ids); DeleteTopics
// <= 5 uses `topic_names`; OffsetFetch <= 7 and FindCoordinator <= 3 are single-group forms.
rpc!(ProduceRequest => ProduceResponse, Produce, 3, 11);
rpc!(FetchRequest => FetchResponse, Fetch, 4, 12);
rpc!(ListOffsetsRequest => ListOffsetsResponse, ListOffsets, 1, 7);
rpc!(MetadataRequest => MetadataResponse, Metadata, 1, 12);
rpc!(OffsetCommitRequest => OffsetCommitResponse, OffsetCommit, 2, 9);
rpc!(OffsetFetchRequest => OffsetFetchResponse, OffsetFetch, 1, 7);
rpc!(FindCoordinatorRequest => FindCoordinatorResponse, FindCoordinator, 0, 3);
rpc!(JoinGroupRequest => JoinGroupResponse, JoinGroup, 0, 7);
rpc!(HeartbeatRequest => HeartbeatResponse, Heartbeat, 0, 4);
rpc!(LeaveGroupRequest => LeaveGroupResponse, LeaveGroup, 0, 4);
rpc!(SyncGroupRequest => SyncGroupResponse, SyncGroup, 0, 5);
rpc!(DescribeGroupsRequest => DescribeGroupsResponse, DescribeGroups, 0, 5);
rpc!(ListGroupsRequest => ListGroupsResponse, ListGroups, 0, 5);
// SaslHandshake v1 frames the tokens in SaslAuthenticate requests.
rpc!(SaslHandshakeRequest => SaslHandshakeResponse, SaslHandshake, 1, 1);
rpc!(SaslAuthenticateRequest => SaslAuthenticateResponse, SaslAuthenticate, 0, 2);
rpc!(ApiVersionsRequest => ApiVersionsResponse, ApiVersions, 0, 3);
rpc!(CreateTopicsRequest => CreateTopicsResponse, CreateTopics, 2, 7);
rpc!(DeleteTopicsRequest => DeleteTopicsResponse, DeleteTopics, 1, 5);
rpc!(DeleteRecordsRequest => DeleteRecordsResponse, DeleteRecords, 0, 2);
rpc!(DescribeConfigsRequest => DescribeConfigsResponse, DescribeConfigs, 1, 4);
rpc!(CreatePartitionsRequest => CreatePartitionsResponse, CreatePartitions, 0, 3);
rpc!(DeleteGroupsRequest => DeleteGroupsResponse, DeleteGroups, 0, 2);
rpc!(IncrementalAlterConfigsRequest => IncrementalAlterConfigsResponse, IncrementalAlterConfigs, 0, 1);
rpc!(OffsetDeleteRequest => OffsetDeleteResponse, OffsetDelete, 0, 0);
rpc!(DescribeClusterRequest => DescribeClusterResponse, DescribeCluster, 0, 1);
rpc!(InitProducerIdRequest => InitProducerIdResponse, InitProducerId, 0, 4);
// Transactions: the client versions (AddPartitionsToTxn v4+ is broker-to-broker; EndTxn and
// TxnOffsetCommit v5 mean transaction version 2, which this client does not speak).
rpc!(AddPartitionsToTxnRequest => AddPartitionsToTxnResponse, AddPartitionsToTxn, 0, 3);
rpc!(AddOffsetsToTxnRequest => AddOffsetsToTxnResponse, AddOffsetsToTxn, 0, 4);
rpc!(EndTxnRequest => EndTxnResponse, EndTxn, 0, 4);
rpc!(TxnOffsetCommitRequest => TxnOffsetCommitResponse, TxnOffsetCommit, 0, 4);
rpc!(DescribeTransactionsRequest => DescribeTransactionsResponse, DescribeTransactions, 0, 0);
rpc!(ListTransactionsRequest => ListTransactionsResponse, ListTransactions, 0, 1);
rpc!(DescribeProducersRequest => DescribeProducersResponse, DescribeProducers, 0, 0);
rpc!(WriteTxnMarkersRequest => WriteTxnMarkersResponse, WriteTxnMarkers, 1, 1);
rpc!(ConsumerGroupHeartbeatRequest => ConsumerGroupHeartbeatResponse, ConsumerGroupHeartbeat, 0, 1);
rpc!(ConsumerGroupDescribeRequest => ConsumerGroupDescribeResponse, ConsumerGroupDescribe, 0, 1);
// ACLs and SCRAM users (v0 of the ACL APIs has no pattern type; Kafka 4 dropped it).
rpc!(CreateAclsRequest => CreateAclsResponse, CreateAcls, 1, 3);
rpc!(DescribeAclsRequest => DescribeAclsResponse, DescribeAcls, 1, 3);
rpc!(DeleteAclsRequest => DeleteAclsResponse, DeleteAcls, 1, 3);
rpc!(AlterUserScramCredentialsRequest => AlterUserScramCredentialsResponse, AlterUserScramCredentials, 0, 0);
rpc!(DescribeUserScramCredentialsRequest => DescribeUserScramCredentialsResponse, DescribeUserScramCredentials, 0, 0);
// Client quotas (v1 is the flexible version; Kafka 4 serves 0-1).
rpc!(DescribeClientQuotasRequest => DescribeClientQuotasResponse, DescribeClientQuotas, 0, 1);
rpc!(AlterClientQuotasRequest => AlterClientQuotasResponse, AlterClientQuotas, 0, 1);
// Partition reassignments (KIP-455; v1 adds allow_replication_factor_change).
rpc!(AlterPartitionReassignmentsRequest => AlterPartitionReassignmentsResponse, AlterPartitionReassignments, 0, 1);
rpc!(ListPartitionReassignmentsRequest => ListPartitionReassignmentsResponse, ListPartitionReassignments, 0, 0);
// Cluster-internal requests (to a controller listener) and the quorum's description.
rpc!(DescribeQuorumRequest => DescribeQuorumResponse, DescribeQuorum, 0, 2);
rpc!(BrokerRegistrationRequest => BrokerRegistrationResponse, BrokerRegistration, 3, 4);
rpc!(BrokerHeartbeatRequest => BrokerHeartbeatResponse, BrokerHeartbeat, 0, 1);
rpc!(AllocateProducerIdsRequest => AllocateProducerIdsResponse, AllocateProducerIds, 0, 0);
// AlterPartition v2 is the first with topic ids; v3 names ISR members with their broker epochs.
rpc!(AlterPartitionRequest => AlterPartitionResponse, AlterPartition, 2, 3);
rpc!(EnvelopeRequest => EnvelopeResponse, Envelope, 0, 0);

/// Encodes a request frame, size prefix included.
pub(crate) fn encode_request<R: Rpc>(
    req: &R,
    version: i16,
    correlation_id: i32,
    client_id: &str,
) -> Result<Bytes, Error> {
    let mut out = BytesMut::with_capacity(128);
    out.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(R::KEY as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(client_id.to_owned())))
        .encode(&mut out, R::KEY.request_header_version(version))
        .map_err(|e| Error::Config(format!("encode {:?} v{version} header: {e}", R::KEY)))?;
    req.encode(&mut out, version)
        .map_err(|e| Error::Config(format!("encode {:?} v{version}: {e:#}", R::KEY)))?;
    let len = i32::try_from(out.len() - 4)
        .map_err(|_| Error::Config(format!("{:?} request over 2 GiB", R::KEY)))?;
    out[..4].copy_from_slice(&len.to_be_bytes());
    Ok(out.freeze())
}

/// Decodes a response frame (without size prefix) for request `R` at `version`.
///
/// The frame size was already bounded by the connection's frame limit; the body is walked by
/// [`crate::guard`] before `kafka-protocol` decodes it (which would otherwise pre-allocate
/// from claimed array lengths); a truncated or garbled body becomes [`Error::Protocol`].
pub(crate) fn decode_response<R: Rpc>(
    mut frame: Bytes,
    version: i16,
) -> Result<R::Response, Error> {
    let header = ResponseHeader::decode(&mut frame, R::KEY.response_header_version(version))
        .map_err(|e| Error::Protocol(format!("{:?} v{version} header: {e}", R::KEY)))?;
    let _ = header;
    crate::guard::check_response(R::KEY, version, &frame)
        .map_err(|e| Error::Protocol(format!("{:?} v{version}: {e}", R::KEY)))?;
    R::Response::decode(&mut frame, version)
        .map_err(|e| Error::Protocol(format!("{:?} v{version}: {e:#}", R::KEY)))
}
