//! Client quota administration (what `kafka-configs.sh --entity-type users/clients/ips` does
//! for quotas): DescribeClientQuotas / AlterClientQuotas (APIs 48/49). An entity is a set of
//! (entity type, name) pairs; a `None` name is the type's default (`<default>`).

use std::collections::BTreeMap;

use protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use protocol::messages::describe_client_quotas_request::ComponentData;
use protocol::messages::{AlterClientQuotasRequest, DescribeClientQuotasRequest};

use crate::admin::Admin;
use crate::cluster::sb;
use crate::error::{Error, Result};

/// An entity: (entity type, name) pairs, `None` for the default of that type; e.g.
/// `[("user", Some("alice")), ("client-id", None)]` is alice's default client.
pub type QuotaEntity = Vec<(String, Option<String>)>;

/// How DescribeClientQuotas matches one entity type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuotaMatch {
    /// The entity with this name.
    Exact(String),
    /// The type's default entity.
    Default,
    /// Any entity of the type, the default included.
    Any,
}

impl QuotaMatch {
    /// Kafka's match type codes.
    fn wire(&self) -> (i8, Option<&str>) {
        match self {
            QuotaMatch::Exact(name) => (0, Some(name)),
            QuotaMatch::Default => (1, None),
            QuotaMatch::Any => (2, None),
        }
    }
}

/// One entity's quotas as described: key (`producer_byte_rate`, ...) to value.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientQuotas {
    /// In Kafka's order of entity types: user, client-id, ip.
    pub entity: QuotaEntity,
    pub values: BTreeMap<String, f64>,
}

/// Where an entity type sorts: user, client-id, ip as Kafka's tools print them, others after.
fn type_rank(entity_type: &str) -> usize {
    ["user", "client-id", "ip"]
        .iter()
        .position(|t| *t == entity_type)
        .unwrap_or(3)
}

/// A quota change: set `key` to the value, or remove it (`None`).
pub type QuotaOp = (String, Option<f64>);

impl Admin {
    /// The quotas of the entities matching every component (entity type, match); `strict`
    /// leaves out entities that have other types besides those named. Sorted by entity.
    pub async fn describe_client_quotas(
        &self,
        components: &[(String, QuotaMatch)],
        strict: bool,
    ) -> Result<Vec<ClientQuotas>> {
        let req = DescribeClientQuotasRequest::default()
            .with_components(
                components
                    .iter()
                    .map(|(entity_type, m)| {
                        let (match_type, name) = m.wire();
                        ComponentData::default()
                            .with_entity_type(sb(entity_type))
                            .with_match_type(match_type)
                            .with_match(name.map(sb))
                    })
                    .collect(),
            )
            .with_strict(strict);
        let resp = self.client().send_any(&req).await?;
        Error::check_msg(resp.error_code, resp.error_message.as_deref())?;
        let mut out: Vec<ClientQuotas> = resp
            .entries
            .unwrap_or_default()
            .iter()
            .map(|e| {
                let mut entity: QuotaEntity = e
                    .entity
                    .iter()
                    .map(|d| {
                        (
                            d.entity_type.to_string(),
                            d.entity_name.as_ref().map(|n| n.to_string()),
                        )
                    })
                    .collect();
                entity.sort_by_key(|(t, n)| (type_rank(t), t.clone(), n.clone()));
                let values = e
                    .values
                    .iter()
                    .map(|v| (v.key.to_string(), v.value))
                    .collect();
                ClientQuotas { entity, values }
            })
            .collect();
        out.sort_by(|a, b| a.entity.cmp(&b.entity));
        Ok(out)
    }

    /// Sets and removes quotas of one entity (`validate_only`: checked, not applied). The
    /// broker's refusal (INVALID_REQUEST with Kafka's message) is the error.
    pub async fn alter_client_quotas(
        &self,
        entity: &QuotaEntity,
        ops: &[QuotaOp],
        validate_only: bool,
    ) -> Result<()> {
        let entry = EntryData::default()
            .with_entity(
                entity
                    .iter()
                    .map(|(t, n)| {
                        EntityData::default()
                            .with_entity_type(sb(t))
                            .with_entity_name(n.as_deref().map(sb))
                    })
                    .collect(),
            )
            .with_ops(
                ops.iter()
                    .map(|(key, value)| {
                        OpData::default()
                            .with_key(sb(key))
                            .with_value(value.unwrap_or(0.0))
                            .with_remove(value.is_none())
                    })
                    .collect(),
            );
        let req = AlterClientQuotasRequest::default()
            .with_entries(vec![entry])
            .with_validate_only(validate_only);
        let resp = self.client().send_controller(&req).await?;
        let [answer] = resp.entries.as_slice() else {
            return Err(Error::Protocol(format!(
                "AlterClientQuotas answered {} entries for 1",
                resp.entries.len()
            )));
        };
        Error::check_msg(answer.error_code, answer.error_message.as_deref())
    }
}
