//! AlterUserScramCredentials (51) and DescribeUserScramCredentials (50): SCRAM credentials in
//! the cluster metadata, as Kafka's `ScramControlManager` keeps them. The broker derives the
//! stored and server keys from the salted password the client sends; the controller validates
//! and writes them; the metadata image serves both describe and authentication.

use super::{code, str_bytes};
use crate::sasl::ScramStore;
use crate::state::BrokerState;
use auth::scram::{ScramCredential, ScramMechanism};
use controller::{Reply, Request, ScramUpsertion};
use model::ErrorCode;
use protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use std::collections::BTreeMap;
use std::sync::Arc;

impl ScramStore for BrokerState {
    fn scram_credential(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
        let image = self.image();
        let c = image
            .scram_credentials
            .get(&(user.to_string(), mechanism.code()))?;
        Some(ScramCredential {
            salt: c.salt.clone(),
            stored_key: c.stored_key.clone(),
            server_key: c.server_key.clone(),
            iterations: u32::try_from(c.iterations).ok()?,
        })
    }
}

/// Decides an AlterUserScramCredentials on the active controller; returns the response and
/// the metadata offset to wait for.
pub async fn alter(
    state: Arc<BrokerState>,
    req: AlterUserScramCredentialsRequest,
) -> (AlterUserScramCredentialsResponse, i64) {
    let deletions = req
        .deletions
        .iter()
        .map(|d| (d.name.to_string(), d.mechanism))
        .collect();
    let upsertions = req
        .upsertions
        .iter()
        .map(|u| {
            let mut up = ScramUpsertion {
                name: u.name.to_string(),
                mechanism: u.mechanism,
                iterations: u.iterations,
                salt: u.salt.to_vec(),
                stored_key: Vec::new(),
                server_key: Vec::new(),
            };
            // An unknown mechanism or bad iteration count keeps empty keys; the controller
            // refuses it with Kafka's error.
            if let (Some(m), Ok(iterations)) = (
                ScramMechanism::from_code(u.mechanism),
                u32::try_from(u.iterations),
            ) {
                if !u.salted_password.is_empty() {
                    let c = ScramCredential::from_salted_password(
                        m,
                        &u.salted_password,
                        &u.salt,
                        iterations,
                    );
                    up.stored_key = c.stored_key;
                    up.server_key = c.server_key;
                }
            }
            up
        })
        .collect();
    let answer = state
        .controller
        .submit(Request::AlterUserScramCredentials {
            deletions,
            upsertions,
        })
        .await;
    let results = match answer.result {
        Ok(Reply::AlterUserScramCredentials(r)) => r
            .into_iter()
            .map(|(user, r)| {
                let out = AlterUserScramCredentialsResult::default().with_user(str_bytes(user));
                match r {
                    Ok(()) => out,
                    Err(e) => out
                        .with_error_code(code(e.code))
                        .with_error_message(Some(str_bytes(e.message))),
                }
            })
            .collect(),
        other => {
            let (c, message) = match other {
                Err(e) => (e.code, e.message),
                Ok(r) => (
                    ErrorCode::UnknownServerError,
                    format!("unexpected controller reply {r:?}"),
                ),
            };
            let mut users: Vec<String> = Vec::new();
            for name in req
                .deletions
                .iter()
                .map(|d| d.name.to_string())
                .chain(req.upsertions.iter().map(|u| u.name.to_string()))
            {
                if !users.contains(&name) {
                    users.push(name);
                }
            }
            users
                .into_iter()
                .map(|u| {
                    AlterUserScramCredentialsResult::default()
                        .with_user(str_bytes(u))
                        .with_error_code(code(c))
                        .with_error_message(Some(str_bytes(message.clone())))
                })
                .collect()
        }
    };
    (
        AlterUserScramCredentialsResponse::default().with_results(results),
        answer.offset,
    )
}

/// DescribeUserScramCredentials from the metadata image, as Kafka answers it: every user with
/// credentials when none are named; a named user without any is RESOURCE_NOT_FOUND, a user
/// named twice DUPLICATE_RESOURCE.
pub fn describe(
    state: &BrokerState,
    req: &DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let image = state.image();
    let mut by_user: BTreeMap<&str, Vec<CredentialInfo>> = BTreeMap::new();
    for ((user, mechanism), c) in &image.scram_credentials {
        by_user.entry(user).or_default().push(
            CredentialInfo::default()
                .with_mechanism(*mechanism)
                .with_iterations(c.iterations),
        );
    }
    let result = |user: &str| {
        let r = DescribeUserScramCredentialsResult::default().with_user(str_bytes(user));
        match by_user.get(user) {
            Some(infos) => r.with_credential_infos(infos.clone()),
            None => r
                .with_error_code(code(ErrorCode::ResourceNotFound))
                .with_error_message(Some(str_bytes(
                    "Attempt to describe a user credential that does not exist",
                ))),
        }
    };
    let results = match req.users.as_deref() {
        None | Some([]) => by_user.keys().map(|u| result(u)).collect(),
        Some(users) => {
            let mut counts: BTreeMap<String, usize> = BTreeMap::new();
            for u in users {
                *counts.entry(u.name.to_string()).or_default() += 1;
            }
            let mut out = Vec::new();
            for u in users {
                let name = u.name.to_string();
                if out
                    .iter()
                    .any(|r: &DescribeUserScramCredentialsResult| r.user.as_str() == name)
                {
                    continue;
                }
                if counts[&name] > 1 {
                    out.push(
                        DescribeUserScramCredentialsResult::default()
                            .with_user(str_bytes(name))
                            .with_error_code(code(ErrorCode::DuplicateResource))
                            .with_error_message(Some(str_bytes(
                                "Cannot describe SCRAM credentials for the same user twice in a single request",
                            ))),
                    );
                } else {
                    out.push(result(&name));
                }
            }
            out
        }
    };
    DescribeUserScramCredentialsResponse::default().with_results(results)
}
