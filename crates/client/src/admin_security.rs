//! ACL and SCRAM user administration (what `kafka-acls.sh` and `kafka-configs.sh --entity-type
//! users` do): CreateAcls / DescribeAcls / DeleteAcls (APIs 30/29/31) and
//! AlterUserScramCredentials / DescribeUserScramCredentials (51/50). The SCRAM salted password
//! is computed here, as Kafka's admin client does: the password never leaves the client.

use auth::acl::{AccessControlEntry, AclBinding, AclBindingFilter, PatternFilter, ResourcePattern};
use auth::ScramMechanism;
use bytes::Bytes;
use model::acl::{filter_codes, AclOperation, PatternType, PermissionType, ResourceType};
use protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use protocol::messages::create_acls_request::AclCreation;
use protocol::messages::delete_acls_request::DeleteAclsFilter;
use protocol::messages::describe_user_scram_credentials_request::UserName;
use protocol::messages::{
    AlterUserScramCredentialsRequest, CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest,
    DescribeUserScramCredentialsRequest,
};

use crate::admin::Admin;
use crate::cluster::sb;
use crate::error::{Error, Result};

/// The wire codes of a filter: (resource type, pattern type, operation, permission).
fn filter_wire(f: &AclBindingFilter) -> (i8, i8, i8, i8) {
    (
        f.resource_type.map_or(filter_codes::ANY, |t| t.code()),
        match f.pattern {
            PatternFilter::Any => filter_codes::ANY,
            PatternFilter::Match => filter_codes::MATCH,
            PatternFilter::Exact(t) => t.code(),
        },
        f.operation.map_or(filter_codes::ANY, |o| o.code()),
        f.permission.map_or(filter_codes::ANY, |p| p.code()),
    )
}

/// An ACL from the broker's wire codes (codes this client does not know are a protocol error).
#[allow(clippy::too_many_arguments)]
fn binding(
    resource_type: i8,
    name: &str,
    pattern_type: i8,
    principal: &str,
    host: &str,
    operation: i8,
    permission: i8,
) -> Result<AclBinding> {
    let bad = |what: &str, code: i8| Error::Protocol(format!("the broker answered {what} {code}"));
    Ok(AclBinding {
        pattern: ResourcePattern {
            resource_type: ResourceType::from_code(resource_type)
                .ok_or_else(|| bad("resource type", resource_type))?,
            name: name.to_owned(),
            pattern_type: PatternType::from_code(pattern_type)
                .ok_or_else(|| bad("pattern type", pattern_type))?,
        },
        entry: AccessControlEntry {
            principal: principal.to_owned(),
            host: host.to_owned(),
            operation: AclOperation::from_code(operation)
                .ok_or_else(|| bad("operation", operation))?,
            permission: PermissionType::from_code(permission)
                .ok_or_else(|| bad("permission type", permission))?,
        },
    })
}

/// A user's SCRAM credential to create or replace.
#[derive(Clone)]
pub struct ScramUpsert {
    pub user: String,
    pub mechanism: ScramMechanism,
    pub iterations: u32,
    pub password: String,
}

impl std::fmt::Debug for ScramUpsert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password stays out of logs.
        f.debug_struct("ScramUpsert")
            .field("user", &self.user)
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// A user's SCRAM credentials as DescribeUserScramCredentials shows them (never a key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserScramCredentials {
    pub user: String,
    /// (mechanism, iterations), one per mechanism the user has.
    pub credentials: Vec<(ScramMechanism, u32)>,
}

/// A random salt as Kafka's `ScramFormatter.secureRandomBytes` makes it: the UTF-8 of a random
/// number in base 36.
fn random_salt() -> Result<Vec<u8>> {
    let mut random = [0u8; 16];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut random)
        .map_err(|_| Error::Config("no secure random source for the SCRAM salt".into()))?;
    Ok(auth::scram::nonce_from_random(u128::from_le_bytes(random)).into_bytes())
}

impl Admin {
    /// Creates ACLs; one result per binding, in order.
    pub async fn create_acls(&self, acls: &[AclBinding]) -> Result<Vec<Result<()>>> {
        let req = CreateAclsRequest::default().with_creations(
            acls.iter()
                .map(|a| {
                    AclCreation::default()
                        .with_resource_type(a.pattern.resource_type.code())
                        .with_resource_name(sb(&a.pattern.name))
                        .with_resource_pattern_type(a.pattern.pattern_type.code())
                        .with_principal(sb(&a.entry.principal))
                        .with_host(sb(&a.entry.host))
                        .with_operation(a.entry.operation.code())
                        .with_permission_type(a.entry.permission.code())
                })
                .collect(),
        );
        let resp = self.client().send_controller(&req).await?;
        if resp.results.len() != acls.len() {
            return Err(Error::Protocol(format!(
                "CreateAcls answered {} results for {} ACLs",
                resp.results.len(),
                acls.len()
            )));
        }
        Ok(resp
            .results
            .iter()
            .map(|r| Error::check_msg(r.error_code, r.error_message.as_deref()))
            .collect())
    }

    /// The ACLs matching `filter`.
    pub async fn describe_acls(&self, filter: &AclBindingFilter) -> Result<Vec<AclBinding>> {
        let (rt, pt, op, perm) = filter_wire(filter);
        let req = DescribeAclsRequest::default()
            .with_resource_type_filter(rt)
            .with_resource_name_filter(filter.name.as_deref().map(sb))
            .with_pattern_type_filter(pt)
            .with_principal_filter(filter.principal.as_deref().map(sb))
            .with_host_filter(filter.host.as_deref().map(sb))
            .with_operation(op)
            .with_permission_type(perm);
        let resp = self.client().send_any(&req).await?;
        Error::check_msg(resp.error_code, resp.error_message.as_deref())?;
        let mut out = Vec::new();
        for r in &resp.resources {
            for a in &r.acls {
                out.push(binding(
                    r.resource_type,
                    r.resource_name.as_str(),
                    r.pattern_type,
                    a.principal.as_str(),
                    a.host.as_str(),
                    a.operation,
                    a.permission_type,
                )?);
            }
        }
        out.sort();
        Ok(out)
    }

    /// Deletes the ACLs matching each filter; per filter, the ACLs it deleted or its error.
    pub async fn delete_acls(
        &self,
        filters: &[AclBindingFilter],
    ) -> Result<Vec<Result<Vec<AclBinding>>>> {
        let req = DeleteAclsRequest::default().with_filters(
            filters
                .iter()
                .map(|f| {
                    let (rt, pt, op, perm) = filter_wire(f);
                    DeleteAclsFilter::default()
                        .with_resource_type_filter(rt)
                        .with_resource_name_filter(f.name.as_deref().map(sb))
                        .with_pattern_type_filter(pt)
                        .with_principal_filter(f.principal.as_deref().map(sb))
                        .with_host_filter(f.host.as_deref().map(sb))
                        .with_operation(op)
                        .with_permission_type(perm)
                })
                .collect(),
        );
        let resp = self.client().send_controller(&req).await?;
        if resp.filter_results.len() != filters.len() {
            return Err(Error::Protocol(format!(
                "DeleteAcls answered {} results for {} filters",
                resp.filter_results.len(),
                filters.len()
            )));
        }
        let mut out = Vec::new();
        for r in &resp.filter_results {
            if let Err(e) = Error::check_msg(r.error_code, r.error_message.as_deref()) {
                out.push(Err(e));
                continue;
            }
            let mut deleted = Vec::new();
            for m in &r.matching_acls {
                Error::check_msg(m.error_code, m.error_message.as_deref())?;
                deleted.push(binding(
                    m.resource_type,
                    m.resource_name.as_str(),
                    m.pattern_type,
                    m.principal.as_str(),
                    m.host.as_str(),
                    m.operation,
                    m.permission_type,
                )?);
            }
            out.push(Ok(deleted));
        }
        Ok(out)
    }

    /// Creates or replaces SCRAM credentials and deletes others in one request; one result per
    /// user named (Kafka answers per user, and DUPLICATE_RESOURCE for a user named twice in
    /// one request, even for two mechanisms). The salted password is computed here with a
    /// fresh random salt.
    pub async fn alter_user_scram_credentials(
        &self,
        upserts: &[ScramUpsert],
        deletions: &[(String, ScramMechanism)],
    ) -> Result<Vec<(String, Result<()>)>> {
        let mut upsertions = Vec::new();
        for u in upserts {
            let salt = random_salt()?;
            let salted = u
                .mechanism
                .salted_password(&u.password, &salt, u.iterations);
            upsertions.push(
                ScramCredentialUpsertion::default()
                    .with_name(sb(&u.user))
                    .with_mechanism(u.mechanism.code())
                    .with_iterations(u.iterations as i32)
                    .with_salt(Bytes::from(salt))
                    .with_salted_password(Bytes::from(salted)),
            );
        }
        let req = AlterUserScramCredentialsRequest::default()
            .with_upsertions(upsertions)
            .with_deletions(
                deletions
                    .iter()
                    .map(|(user, m)| {
                        ScramCredentialDeletion::default()
                            .with_name(sb(user))
                            .with_mechanism(m.code())
                    })
                    .collect(),
            );
        let resp = self.client().send_controller(&req).await?;
        Ok(resp
            .results
            .iter()
            .map(|r| {
                (
                    r.user.to_string(),
                    Error::check_msg(r.error_code, r.error_message.as_deref()),
                )
            })
            .collect())
    }

    /// SCRAM credentials of `users` (all users when `None`); a named user without any is an
    /// error (Kafka's RESOURCE_NOT_FOUND) in its own entry.
    pub async fn describe_user_scram_credentials(
        &self,
        users: Option<&[String]>,
    ) -> Result<Vec<(String, Result<UserScramCredentials>)>> {
        let req = DescribeUserScramCredentialsRequest::default().with_users(users.map(|us| {
            us.iter()
                .map(|u| UserName::default().with_name(sb(u)))
                .collect()
        }));
        let resp = self.client().send_any(&req).await?;
        Error::check_msg(resp.error_code, resp.error_message.as_deref())?;
        let mut out = Vec::new();
        for r in &resp.results {
            let user = r.user.to_string();
            let entry = Error::check_msg(r.error_code, r.error_message.as_deref()).and_then(|()| {
                let mut credentials = Vec::new();
                for c in &r.credential_infos {
                    let m = ScramMechanism::from_code(c.mechanism).ok_or_else(|| {
                        Error::Protocol(format!("unknown SCRAM mechanism {}", c.mechanism))
                    })?;
                    credentials.push((m, c.iterations.max(0) as u32));
                }
                credentials.sort();
                Ok(UserScramCredentials {
                    user: user.clone(),
                    credentials,
                })
            });
            out.push((user, entry));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_go_on_the_wire_with_kafkas_codes() {
        let mut f = AclBindingFilter::any();
        assert_eq!(filter_wire(&f), (1, 1, 1, 1));
        f.resource_type = Some(ResourceType::Group);
        f.pattern = PatternFilter::Match;
        f.operation = Some(AclOperation::Read);
        f.permission = Some(PermissionType::Deny);
        assert_eq!(filter_wire(&f), (3, 2, 3, 2));
        f.pattern = PatternFilter::Exact(PatternType::Prefixed);
        assert_eq!(filter_wire(&f).1, 4);
        // What goes out comes back as the same filter on the broker side.
        let back = AclBindingFilter::from_wire(3, None, 4, None, None, 3, 2).unwrap();
        assert_eq!(back, f);
    }

    #[test]
    fn unknown_codes_in_an_answer_are_a_protocol_error() {
        assert!(binding(2, "t", 3, "User:a", "*", 3, 3).is_ok());
        assert!(binding(99, "t", 3, "User:a", "*", 3, 3).is_err());
        assert!(binding(2, "t", 1, "User:a", "*", 3, 3).is_err());
        assert!(binding(2, "t", 3, "User:a", "*", 1, 3).is_err());
    }

    #[test]
    fn salts_are_random_base36_text() {
        let a = random_salt().unwrap();
        let b = random_salt().unwrap();
        assert_ne!(a, b);
        assert!(a.iter().all(|c| c.is_ascii_alphanumeric()));
        assert!(a.len() >= 20);
    }

    #[test]
    fn the_password_stays_out_of_debug_output() {
        let u = ScramUpsert {
            user: "alice".into(),
            mechanism: ScramMechanism::Sha256,
            iterations: 4096,
            password: "hunter2".into(),
        };
        assert!(!format!("{u:?}").contains("hunter2"));
    }
}
