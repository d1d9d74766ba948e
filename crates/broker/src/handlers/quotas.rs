//! DescribeClientQuotas (48) and AlterClientQuotas (49): client quotas in the cluster
//! metadata (Kafka's `ClientQuotaRecord`), decided by the controller and replayed by every
//! broker, which enforces them (`crate::quotas`).

use super::{code, str_bytes};
use crate::state::BrokerState;
use auth::quota::{ENTITY_CLIENT_ID, ENTITY_IP, ENTITY_USER};
use controller::{Reply, Request};
use model::ErrorCode;
use protocol::messages::alter_client_quotas_response::{
    EntityData as AlterEntityData, EntryData as AlterEntryData,
};
use protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};
use std::sync::Arc;

/// Kafka's DescribeClientQuotas match types.
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_ANY: i8 = 2;

/// Decides an AlterClientQuotas on the active controller; returns the response and the
/// metadata offset to wait for.
pub async fn alter(
    state: Arc<BrokerState>,
    req: AlterClientQuotasRequest,
) -> (AlterClientQuotasResponse, i64) {
    // Kafka reads each entry's entity into a map by type: a type named twice keeps its last
    // name, and the answer names the entity as read.
    let entities: Vec<Vec<(String, Option<String>)>> = req
        .entries
        .iter()
        .map(|e| entity_by_type(&e.entity))
        .collect();
    let entries = req
        .entries
        .iter()
        .zip(&entities)
        .map(|(e, entity)| {
            let ops = e
                .ops
                .iter()
                .map(|o| (o.key.to_string(), (!o.remove).then_some(o.value)))
                .collect();
            (entity.clone(), ops)
        })
        .collect();
    let answer = state
        .controller
        .submit(Request::AlterClientQuotas {
            entries,
            validate_only: req.validate_only,
        })
        .await;
    let results: Vec<Result<(), (ErrorCode, String)>> = match answer.result {
        Ok(Reply::AlterClientQuotas(r)) => r
            .into_iter()
            .map(|r| r.map_err(|e| (e.code, e.message)))
            .collect(),
        Ok(other) => vec![
            Err((
                ErrorCode::UnknownServerError,
                format!("unexpected controller reply {other:?}")
            ));
            req.entries.len()
        ],
        Err(e) => vec![Err((e.code, e.message)); req.entries.len()],
    };
    let entries = entities
        .into_iter()
        .zip(results)
        .map(|(entity, r)| {
            let out = AlterEntryData::default().with_entity(
                entity
                    .into_iter()
                    .map(|(t, n)| {
                        AlterEntityData::default()
                            .with_entity_type(str_bytes(t))
                            .with_entity_name(n.map(str_bytes))
                    })
                    .collect(),
            );
            match r {
                // Kafka answers a null message on success (ApiError.NONE has none).
                Ok(()) => out.with_error_message(None),
                Err((c, m)) => out
                    .with_error_code(code(c))
                    .with_error_message(Some(str_bytes(m))),
            }
        })
        .collect();
    (
        AlterClientQuotasResponse::default().with_entries(entries),
        answer.offset,
    )
}

/// An entry's entity as Kafka reads it: one name per entity type, the last one given, at the
/// place the type first appears.
fn entity_by_type(
    entity: &[protocol::messages::alter_client_quotas_request::EntityData],
) -> Vec<(String, Option<String>)> {
    let mut out: Vec<(String, Option<String>)> = Vec::with_capacity(entity.len());
    for d in entity {
        let name = d.entity_name.as_ref().map(|n| n.to_string());
        match out.iter_mut().find(|(t, _)| **t == *d.entity_type) {
            Some(slot) => slot.1 = name,
            None => out.push((d.entity_type.to_string(), name)),
        }
    }
    out
}

/// DescribeClientQuotas from the metadata image, with Kafka's filter semantics: each
/// component matches an entity type exactly (a name, or the default when `match` is null),
/// the default only, or any entity of that type; `strict` keeps only entities with no other
/// types. Components naming a type twice, or an unknown type or match type, are
/// INVALID_REQUEST.
pub fn describe(
    state: &BrokerState,
    req: &DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let invalid = |m: &str| {
        DescribeClientQuotasResponse::default()
            .with_error_code(code(ErrorCode::InvalidRequest))
            .with_error_message(Some(str_bytes(m)))
    };
    let mut filters: Vec<(&str, i8, Option<String>)> = Vec::new();
    for c in &req.components {
        let ty = c.entity_type.as_str();
        if ![ENTITY_USER, ENTITY_CLIENT_ID, ENTITY_IP].contains(&ty) {
            return invalid(&format!("Custom entity type '{ty}' not supported"));
        }
        if filters.iter().any(|(t, _, _)| *t == ty) {
            return invalid(&format!(
                "Entity type {ty} cannot appear more than once in the filter."
            ));
        }
        if !(MATCH_EXACT..=MATCH_ANY).contains(&c.match_type) {
            return invalid(&format!("Unknown match type {}", c.match_type));
        }
        filters.push((ty, c.match_type, c._match.as_ref().map(|m| m.to_string())));
    }
    let has_ip = filters.iter().any(|(t, _, _)| *t == ENTITY_IP);
    if has_ip && filters.len() > 1 {
        return invalid("Invalid entity filter component combination, IP filter component should not be used with user or clientId filter component.");
    }
    let image = state.image();
    let entries = image
        .client_quotas
        .iter()
        .filter(|(entity, _)| {
            let matches = filters.iter().all(|(ty, match_type, m)| {
                let Some((_, name)) = entity.iter().find(|(t, _)| t == ty) else {
                    return false;
                };
                match *match_type {
                    MATCH_EXACT => name == m,
                    MATCH_DEFAULT => name.is_none(),
                    _ => true,
                }
            });
            let strict_ok = !req.strict || entity.len() == filters.len();
            matches && strict_ok
        })
        .map(|(entity, values)| {
            EntryData::default()
                .with_entity(
                    entity
                        .iter()
                        .map(|(t, n)| {
                            EntityData::default()
                                .with_entity_type(str_bytes(t.clone()))
                                .with_entity_name(n.clone().map(str_bytes))
                        })
                        .collect(),
                )
                .with_values(
                    values
                        .iter()
                        .map(|(k, v)| {
                            ValueData::default()
                                .with_key(str_bytes(k.clone()))
                                .with_value(*v)
                        })
                        .collect(),
                )
        })
        .collect();
    DescribeClientQuotasResponse::default().with_entries(Some(entries))
}
