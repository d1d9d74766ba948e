//! DescribeAcls, CreateAcls and DeleteAcls (APIs 29-31): ACLs live in the cluster metadata
//! (the controller writes `AccessControlEntry` records); Describe reads the committed image.
//! Without an authorizer they are answered SECURITY_DISABLED, as Kafka does.

use super::{code, str_bytes};
use crate::state::BrokerState;
use auth::acl::{validate_new_acl, AclBinding, AclBindingFilter};
use controller::{Reply, Request};
use model::ErrorCode;
use protocol::messages::create_acls_response::AclCreationResult;
use protocol::messages::delete_acls_response::{DeleteAclsFilterResult, DeleteAclsMatchingAcl};
use protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use std::collections::BTreeMap;
use std::sync::Arc;

const NO_AUTHORIZER: &str = "No Authorizer is configured.";

fn enabled(state: &BrokerState) -> bool {
    state.config.security.authorizer.is_some()
}

/// The image's ACLs as bindings (codes this build does not know are skipped).
fn bindings(state: &BrokerState) -> Vec<AclBinding> {
    state
        .image()
        .acls
        .values()
        .filter_map(controller::acl_binding)
        .collect()
}

/// DescribeAcls: the ACLs matching the filter, grouped by resource pattern.
pub fn describe(state: &BrokerState, r: &DescribeAclsRequest) -> DescribeAclsResponse {
    let fail = |e: ErrorCode, message: String| {
        DescribeAclsResponse::default()
            .with_error_code(code(e))
            .with_error_message(Some(str_bytes(message)))
    };
    if !enabled(state) {
        return fail(ErrorCode::SecurityDisabled, NO_AUTHORIZER.into());
    }
    let filter = match AclBindingFilter::from_wire(
        r.resource_type_filter,
        r.resource_name_filter.as_deref(),
        r.pattern_type_filter,
        r.principal_filter.as_deref(),
        r.host_filter.as_deref(),
        r.operation,
        r.permission_type,
    ) {
        Ok(f) => f,
        Err(message) => return fail(ErrorCode::InvalidRequest, message),
    };
    let mut by_pattern: BTreeMap<_, Vec<AclDescription>> = BTreeMap::new();
    for b in bindings(state).into_iter().filter(|b| filter.matches(b)) {
        by_pattern.entry(b.pattern).or_default().push(
            AclDescription::default()
                .with_principal(str_bytes(b.entry.principal))
                .with_host(str_bytes(b.entry.host))
                .with_operation(b.entry.operation.code())
                .with_permission_type(b.entry.permission.code()),
        );
    }
    let resources = by_pattern
        .into_iter()
        .map(|(p, acls)| {
            DescribeAclsResource::default()
                .with_resource_type(p.resource_type.code())
                .with_resource_name(str_bytes(p.name))
                .with_pattern_type(p.pattern_type.code())
                .with_acls(acls)
        })
        .collect();
    DescribeAclsResponse::default().with_resources(resources)
}

/// CreateAcls: each creation is validated here (INVALID_REQUEST with Kafka's message), the
/// valid ones are written by the controller. Returns the offset to wait for.
pub async fn create(state: Arc<BrokerState>, r: CreateAclsRequest) -> (CreateAclsResponse, i64) {
    let result = |e: ErrorCode, message: String| {
        AclCreationResult::default()
            .with_error_code(code(e))
            .with_error_message(Some(str_bytes(message)))
    };
    if !enabled(&state) {
        let results = r
            .creations
            .iter()
            .map(|_| result(ErrorCode::SecurityDisabled, NO_AUTHORIZER.into()))
            .collect();
        return (CreateAclsResponse::default().with_results(results), -1);
    }
    let mut results: Vec<Option<AclCreationResult>> = Vec::with_capacity(r.creations.len());
    let mut valid = Vec::new();
    for c in &r.creations {
        match validate_new_acl(
            c.resource_type,
            &c.resource_name,
            c.resource_pattern_type,
            &c.principal,
            &c.host,
            c.operation,
            c.permission_type,
        ) {
            Ok(b) => {
                valid.push(b);
                results.push(None);
            }
            Err(message) => results.push(Some(result(ErrorCode::InvalidRequest, message))),
        }
    }
    let mut offset = -1;
    let mut decided: std::vec::IntoIter<AclCreationResult> = Vec::new().into_iter();
    if !valid.is_empty() {
        let n = valid.len();
        let answer = state.controller.submit(Request::CreateAcls(valid)).await;
        offset = answer.offset;
        let out: Vec<AclCreationResult> = match answer.result {
            Ok(Reply::CreateAcls(rs)) => rs
                .into_iter()
                .map(|r| match r {
                    Ok(()) => AclCreationResult::default(),
                    Err(e) => result(e.code, e.message),
                })
                .collect(),
            Ok(other) => (0..n)
                .map(|_| {
                    result(
                        ErrorCode::UnknownServerError,
                        format!("unexpected controller reply {other:?}"),
                    )
                })
                .collect(),
            Err(e) => (0..n).map(|_| result(e.code, e.message.clone())).collect(),
        };
        decided = out.into_iter();
    }
    let results = results
        .into_iter()
        .map(|r| {
            r.or_else(|| decided.next())
                .unwrap_or_else(|| result(ErrorCode::UnknownServerError, "no result".into()))
        })
        .collect();
    (CreateAclsResponse::default().with_results(results), offset)
}

/// DeleteAcls: per filter, the ACLs it deleted; a filter with UNKNOWN values is INVALID_REQUEST.
pub async fn delete(state: Arc<BrokerState>, r: DeleteAclsRequest) -> (DeleteAclsResponse, i64) {
    let failed = |e: ErrorCode, message: String| {
        DeleteAclsFilterResult::default()
            .with_error_code(code(e))
            .with_error_message(Some(str_bytes(message)))
    };
    if !enabled(&state) {
        let results = r
            .filters
            .iter()
            .map(|_| failed(ErrorCode::SecurityDisabled, NO_AUTHORIZER.into()))
            .collect();
        return (
            DeleteAclsResponse::default().with_filter_results(results),
            -1,
        );
    }
    let mut results: Vec<Option<DeleteAclsFilterResult>> = Vec::new();
    let mut filters = Vec::new();
    for f in &r.filters {
        match AclBindingFilter::from_wire(
            f.resource_type_filter,
            f.resource_name_filter.as_deref(),
            f.pattern_type_filter,
            f.principal_filter.as_deref(),
            f.host_filter.as_deref(),
            f.operation,
            f.permission_type,
        ) {
            Ok(filter) => {
                filters.push(filter);
                results.push(None);
            }
            Err(message) => results.push(Some(failed(ErrorCode::InvalidRequest, message))),
        }
    }
    let mut offset = -1;
    let mut decided: std::vec::IntoIter<DeleteAclsFilterResult> = Vec::new().into_iter();
    if !filters.is_empty() {
        let n = filters.len();
        let answer = state.controller.submit(Request::DeleteAcls(filters)).await;
        offset = answer.offset;
        let out: Vec<DeleteAclsFilterResult> = match answer.result {
            Ok(Reply::DeleteAcls(per_filter)) => per_filter
                .into_iter()
                .map(|deleted| {
                    DeleteAclsFilterResult::default().with_matching_acls(
                        deleted
                            .into_iter()
                            .map(|b| {
                                DeleteAclsMatchingAcl::default()
                                    .with_resource_type(b.pattern.resource_type.code())
                                    .with_resource_name(str_bytes(b.pattern.name))
                                    .with_pattern_type(b.pattern.pattern_type.code())
                                    .with_principal(str_bytes(b.entry.principal))
                                    .with_host(str_bytes(b.entry.host))
                                    .with_operation(b.entry.operation.code())
                                    .with_permission_type(b.entry.permission.code())
                            })
                            .collect(),
                    )
                })
                .collect(),
            Ok(other) => (0..n)
                .map(|_| {
                    failed(
                        ErrorCode::UnknownServerError,
                        format!("unexpected controller reply {other:?}"),
                    )
                })
                .collect(),
            Err(e) => (0..n).map(|_| failed(e.code, e.message.clone())).collect(),
        };
        decided = out.into_iter();
    }
    let results = results
        .into_iter()
        .map(|r| {
            r.or_else(|| decided.next())
                .unwrap_or_else(|| failed(ErrorCode::UnknownServerError, "no result".into()))
        })
        .collect();
    (
        DeleteAclsResponse::default().with_filter_results(results),
        offset,
    )
}
