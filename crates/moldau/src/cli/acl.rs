//! `moldau acl add|list|remove`: what `kafka-acls.sh` does, with its vocabulary
//! (`--allow-principal`, `--operation`, `--topic`, `--resource-pattern-type`...), over
//! CreateAcls / DescribeAcls / DeleteAcls (works against Kafka too).

use anyhow::{bail, Context};
use clap::Subcommand;
use client::acl::{
    AccessControlEntry, AclBinding, AclBindingFilter, AclOperation, PatternFilter, PatternType,
    PermissionType, ResourcePattern, ResourceType, CLUSTER_NAME,
};
use serde_json::json;

use super::output::{print_json, Table};
use super::Common;

/// The resources a command names (kafka-acls' resource options).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Resources {
    /// A topic (repeatable); `*` is every topic.
    #[arg(long = "topic", value_name = "TOPIC")]
    pub topics: Vec<String>,
    /// A consumer group (repeatable); `*` is every group.
    #[arg(long = "group", value_name = "GROUP")]
    pub groups: Vec<String>,
    /// The cluster resource (for CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, IDEMPOTENT_WRITE,
    /// DESCRIBE_CONFIGS, ALTER_CONFIGS).
    #[arg(long)]
    pub cluster: bool,
    /// A transactional id (repeatable); `*` is every transactional id.
    #[arg(long = "transactional-id", value_name = "ID")]
    pub transactional_ids: Vec<String>,
}

impl Resources {
    fn list(&self) -> Vec<(ResourceType, String)> {
        let mut out = Vec::new();
        out.extend(self.topics.iter().map(|t| (ResourceType::Topic, t.clone())));
        out.extend(self.groups.iter().map(|g| (ResourceType::Group, g.clone())));
        if self.cluster {
            out.push((ResourceType::Cluster, CLUSTER_NAME.to_string()));
        }
        out.extend(
            self.transactional_ids
                .iter()
                .map(|t| (ResourceType::TransactionalId, t.clone())),
        );
        out
    }
}

/// Who, from where, doing what (kafka-acls' entry options).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Entries {
    /// A principal the ACLs allow, `Type:name` (e.g. `User:alice`, `User:*`); repeatable.
    #[arg(long = "allow-principal", value_name = "PRINCIPAL")]
    pub allow_principals: Vec<String>,
    /// A principal the ACLs deny (DENY wins over ALLOW); repeatable.
    #[arg(long = "deny-principal", value_name = "PRINCIPAL")]
    pub deny_principals: Vec<String>,
    /// A host the allow ACLs apply to (default `*`, every host); repeatable.
    #[arg(long = "allow-host", value_name = "HOST")]
    pub allow_hosts: Vec<String>,
    /// A host the deny ACLs apply to (default `*`); repeatable.
    #[arg(long = "deny-host", value_name = "HOST")]
    pub deny_hosts: Vec<String>,
    /// An operation (Read, Write, Create, Delete, Alter, Describe, ClusterAction,
    /// DescribeConfigs, AlterConfigs, IdempotentWrite, TwoPhaseCommit, All); repeatable;
    /// default All.
    #[arg(long = "operation", value_name = "OPERATION")]
    pub operations: Vec<String>,
    /// Convenience: what a producer needs (WRITE, DESCRIBE, CREATE on the topics; WRITE,
    /// DESCRIBE on the transactional ids; with --idempotent IDEMPOTENT_WRITE on the cluster).
    #[arg(long, conflicts_with = "operations")]
    pub producer: bool,
    /// With --producer: also IDEMPOTENT_WRITE on the cluster.
    #[arg(long, requires = "producer")]
    pub idempotent: bool,
    /// Convenience: what a consumer needs (READ, DESCRIBE on the topics; READ on the groups).
    #[arg(long, conflicts_with = "operations")]
    pub consumer: bool,
}

#[derive(Subcommand, Debug)]
pub enum AclCommand {
    /// Add ACLs: every principal x host x operation x resource given (as `kafka-acls --add`).
    ///
    /// Example: `moldau acl add --allow-principal User:alice --operation Read --operation
    /// Describe --topic orders --group billing`.
    Add {
        #[command(flatten)]
        resources: Resources,
        #[command(flatten)]
        entries: Entries,
        /// LITERAL (the exact name; `*` matches every name) or PREFIXED (every name starting
        /// with it).
        #[arg(long, default_value = "literal", value_name = "TYPE")]
        resource_pattern_type: String,
        #[command(flatten)]
        common: Common,
    },
    /// List ACLs (all of them, or those of the resources and principal given).
    List {
        #[command(flatten)]
        resources: Resources,
        /// Only the ACLs of this principal (`User:alice`).
        #[arg(long, value_name = "PRINCIPAL")]
        principal: Option<String>,
        /// How resource names match: LITERAL (default, as kafka-acls), PREFIXED, ANY (any
        /// pattern type with exactly that name) or MATCH (every ACL that applies to the
        /// resource, wildcard and prefixes included).
        #[arg(long, default_value = "literal", value_name = "TYPE")]
        resource_pattern_type: String,
        #[command(flatten)]
        common: Common,
    },
    /// Remove ACLs. With principals: exactly the ACLs `add` would create with the same options;
    /// without: every ACL of the resources given (as `kafka-acls --remove`, no prompt).
    Remove {
        #[command(flatten)]
        resources: Resources,
        #[command(flatten)]
        entries: Entries,
        /// LITERAL, PREFIXED, or (without principals) ANY / MATCH.
        #[arg(long, default_value = "literal", value_name = "TYPE")]
        resource_pattern_type: String,
        #[command(flatten)]
        common: Common,
    },
}

fn pattern_filter(s: &str) -> anyhow::Result<PatternFilter> {
    Ok(match s.to_ascii_lowercase().as_str() {
        "literal" => PatternFilter::Exact(PatternType::Literal),
        "prefixed" => PatternFilter::Exact(PatternType::Prefixed),
        "any" => PatternFilter::Any,
        "match" => PatternFilter::Match,
        _ => bail!("--resource-pattern-type {s:?}: expected literal, prefixed, any or match"),
    })
}

fn pattern_type(s: &str) -> anyhow::Result<PatternType> {
    match pattern_filter(s)? {
        PatternFilter::Exact(t) => Ok(t),
        _ => bail!("--resource-pattern-type {s:?}: adding ACLs needs literal or prefixed"),
    }
}

fn check_principal(p: &str) -> anyhow::Result<()> {
    match p.split_once(':') {
        Some((t, n)) if !t.is_empty() && !n.is_empty() => Ok(()),
        _ => bail!("principal {p:?}: expected Type:name, e.g. User:alice"),
    }
}

/// The ACLs `add` creates (and `remove` with principals deletes): kafka-acls' rules.
fn bindings(
    resources: &Resources,
    entries: &Entries,
    pattern: PatternType,
) -> anyhow::Result<Vec<AclBinding>> {
    if entries.allow_principals.is_empty() && entries.deny_principals.is_empty() {
        bail!("give at least one --allow-principal or --deny-principal");
    }
    for p in entries
        .allow_principals
        .iter()
        .chain(&entries.deny_principals)
    {
        check_principal(p)?;
    }
    let res = resources.list();
    if res.is_empty() {
        bail!("give at least one resource: --topic, --group, --cluster or --transactional-id");
    }
    // (resource, operations) pairs.
    let mut targets: Vec<((ResourceType, String), Vec<AclOperation>)> = Vec::new();
    if entries.producer || entries.consumer {
        use AclOperation::*;
        if resources.topics.is_empty() {
            bail!("--producer and --consumer need --topic");
        }
        if entries.consumer && resources.groups.is_empty() {
            bail!("--consumer needs --group");
        }
        for r in &res {
            let mut ops = Vec::new();
            match r.0 {
                ResourceType::Topic => {
                    if entries.producer {
                        ops.extend([Write, Describe, Create]);
                    }
                    if entries.consumer {
                        ops.extend([Read, Describe]);
                    }
                }
                ResourceType::Group if entries.consumer => ops.push(Read),
                ResourceType::TransactionalId if entries.producer => ops.extend([Write, Describe]),
                _ => {}
            }
            let mut unique: Vec<AclOperation> = Vec::new();
            for op in ops {
                if !unique.contains(&op) {
                    unique.push(op);
                }
            }
            let ops = unique;
            if !ops.is_empty() {
                targets.push((r.clone(), ops));
            }
        }
        if entries.idempotent {
            targets.push((
                (ResourceType::Cluster, CLUSTER_NAME.to_string()),
                vec![IdempotentWrite],
            ));
        }
    } else {
        let mut ops = Vec::new();
        for o in &entries.operations {
            let op = AclOperation::parse(o).with_context(|| format!("unknown operation {o:?}"))?;
            if !ops.contains(&op) {
                ops.push(op);
            }
        }
        if ops.is_empty() {
            ops.push(AclOperation::All);
        }
        for r in &res {
            for op in &ops {
                if *op != AclOperation::All && !r.0.supported_operations().contains(op) {
                    bail!(
                        "ResourceType {} only supports operations {}",
                        r.0.name(),
                        r.0.supported_operations()
                            .iter()
                            .map(|o| o.name())
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                }
            }
            targets.push((r.clone(), ops.clone()));
        }
    }
    let star = || vec!["*".to_string()];
    let allow_hosts = if entries.allow_hosts.is_empty() {
        star()
    } else {
        entries.allow_hosts.clone()
    };
    let deny_hosts = if entries.deny_hosts.is_empty() {
        star()
    } else {
        entries.deny_hosts.clone()
    };
    let mut out = Vec::new();
    for ((rtype, name), ops) in &targets {
        for (principals, hosts, permission) in [
            (
                &entries.allow_principals,
                &allow_hosts,
                PermissionType::Allow,
            ),
            (&entries.deny_principals, &deny_hosts, PermissionType::Deny),
        ] {
            for principal in principals {
                for host in hosts {
                    for op in ops {
                        out.push(AclBinding {
                            pattern: ResourcePattern {
                                resource_type: *rtype,
                                name: name.clone(),
                                pattern_type: pattern,
                            },
                            entry: AccessControlEntry {
                                principal: principal.clone(),
                                host: host.clone(),
                                operation: *op,
                                permission,
                            },
                        });
                    }
                }
            }
        }
    }
    Ok(out)
}

/// An exact-match filter for one ACL.
fn exact(b: &AclBinding) -> AclBindingFilter {
    AclBindingFilter {
        resource_type: Some(b.pattern.resource_type),
        name: Some(b.pattern.name.clone()),
        pattern: PatternFilter::Exact(b.pattern.pattern_type),
        principal: Some(b.entry.principal.clone()),
        host: Some(b.entry.host.clone()),
        operation: Some(b.entry.operation),
        permission: Some(b.entry.permission),
    }
}

/// One filter per resource (or one for everything), optionally for one principal.
fn resource_filters(
    resources: &Resources,
    pattern: PatternFilter,
    principal: Option<&str>,
) -> Vec<AclBindingFilter> {
    let res = resources.list();
    let base = AclBindingFilter {
        principal: principal.map(str::to_string),
        ..AclBindingFilter::any()
    };
    if res.is_empty() {
        return vec![base];
    }
    res.into_iter()
        .map(|(t, n)| AclBindingFilter {
            resource_type: Some(t),
            name: Some(n),
            pattern,
            ..base.clone()
        })
        .collect()
}

fn print_acls(acls: &[AclBinding], json_out: bool) -> anyhow::Result<()> {
    if json_out {
        return print_json(&json!(acls
            .iter()
            .map(|a| json!({
                "resource_type": a.pattern.resource_type.name(),
                "resource_name": a.pattern.name,
                "pattern_type": a.pattern.pattern_type.name(),
                "principal": a.entry.principal,
                "host": a.entry.host,
                "operation": a.entry.operation.name(),
                "permission": a.entry.permission.name(),
            }))
            .collect::<Vec<_>>()));
    }
    let mut table = Table::new(&[
        "RESOURCE-TYPE",
        "RESOURCE",
        "PATTERN",
        "PRINCIPAL",
        "HOST",
        "OPERATION",
        "PERMISSION",
    ]);
    for a in acls {
        table.row(vec![
            a.pattern.resource_type.name().to_string(),
            a.pattern.name.clone(),
            a.pattern.pattern_type.name().to_string(),
            a.entry.principal.clone(),
            a.entry.host.clone(),
            a.entry.operation.name().to_string(),
            a.entry.permission.name().to_string(),
        ]);
    }
    table.print()
}

pub async fn run(cmd: AclCommand) -> anyhow::Result<()> {
    match cmd {
        AclCommand::Add {
            resources,
            entries,
            resource_pattern_type,
            common,
        } => {
            let acls = bindings(&resources, &entries, pattern_type(&resource_pattern_type)?)?;
            let admin = common.admin().await?;
            let results = admin.create_acls(&acls).await.context("create ACLs")?;
            let mut failed = Vec::new();
            let mut added = Vec::new();
            for (a, r) in acls.iter().zip(results) {
                match r {
                    Ok(()) => added.push(a.clone()),
                    Err(e) => failed.push(format!("{a}: {e}")),
                }
            }
            print_acls(&added, common.json)?;
            if !failed.is_empty() {
                bail!("{} ACL(s) not added:\n{}", failed.len(), failed.join("\n"));
            }
        }
        AclCommand::List {
            resources,
            principal,
            resource_pattern_type,
            common,
        } => {
            if let Some(p) = &principal {
                check_principal(p)?;
            }
            let pattern = pattern_filter(&resource_pattern_type)?;
            let admin = common.admin().await?;
            let mut all = Vec::new();
            for f in resource_filters(&resources, pattern, principal.as_deref()) {
                all.extend(admin.describe_acls(&f).await.context("describe ACLs")?);
            }
            all.sort();
            all.dedup();
            print_acls(&all, common.json)?;
        }
        AclCommand::Remove {
            resources,
            entries,
            resource_pattern_type,
            common,
        } => {
            let filters = if entries.allow_principals.is_empty()
                && entries.deny_principals.is_empty()
            {
                if resources.list().is_empty() {
                    bail!("give at least one resource: --topic, --group, --cluster or --transactional-id");
                }
                if !entries.operations.is_empty() || entries.producer || entries.consumer {
                    bail!("--operation, --producer and --consumer need a principal (--allow-principal or --deny-principal)");
                }
                resource_filters(&resources, pattern_filter(&resource_pattern_type)?, None)
            } else {
                bindings(&resources, &entries, pattern_type(&resource_pattern_type)?)?
                    .iter()
                    .map(exact)
                    .collect()
            };
            let admin = common.admin().await?;
            let results = admin.delete_acls(&filters).await.context("delete ACLs")?;
            let mut removed = Vec::new();
            let mut failed = Vec::new();
            for r in results {
                match r {
                    Ok(acls) => removed.extend(acls),
                    Err(e) => failed.push(e.to_string()),
                }
            }
            removed.sort();
            removed.dedup();
            print_acls(&removed, common.json)?;
            if !failed.is_empty() {
                bail!("removing ACLs failed: {}", failed.join("; "));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(allow: &[&str], ops: &[&str]) -> Entries {
        Entries {
            allow_principals: allow.iter().map(|s| s.to_string()).collect(),
            operations: ops.iter().map(|s| s.to_string()).collect(),
            ..Entries::default()
        }
    }

    #[test]
    fn add_makes_every_principal_host_operation_resource_combination() {
        let r = Resources {
            topics: vec!["orders".into()],
            groups: vec!["billing".into()],
            ..Resources::default()
        };
        let mut e = entries(&["User:alice"], &["read", "Describe"]);
        e.deny_principals = vec!["User:bob".into()];
        e.deny_hosts = vec!["10.0.0.1".into()];
        let acls = bindings(&r, &e, PatternType::Literal).unwrap();
        // 2 resources x 2 operations x (alice on * + bob on 10.0.0.1).
        assert_eq!(acls.len(), 8);
        assert!(acls.iter().any(|a| a.entry.principal == "User:bob"
            && a.entry.host == "10.0.0.1"
            && a.entry.permission == PermissionType::Deny
            && a.pattern.resource_type == ResourceType::Group));
        assert!(acls
            .iter()
            .filter(|a| a.entry.principal == "User:alice")
            .all(|a| a.entry.host == "*" && a.entry.permission == PermissionType::Allow));
    }

    #[test]
    fn unsupported_operations_and_missing_parts_are_refused() {
        let group = Resources {
            groups: vec!["g".into()],
            ..Resources::default()
        };
        let err = bindings(
            &group,
            &entries(&["User:a"], &["Write"]),
            PatternType::Literal,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("GROUP only supports"), "{err}");
        assert!(bindings(&group, &entries(&[], &["Read"]), PatternType::Literal).is_err());
        assert!(bindings(
            &Resources::default(),
            &entries(&["User:a"], &["Read"]),
            PatternType::Literal
        )
        .is_err());
        assert!(bindings(
            &group,
            &entries(&["alice"], &["Read"]),
            PatternType::Literal
        )
        .is_err());
        assert!(bindings(
            &group,
            &entries(&["User:a"], &["Fly"]),
            PatternType::Literal
        )
        .is_err());
        assert!(pattern_type("match").is_err());
    }

    #[test]
    fn producer_and_consumer_shortcuts_grant_what_kafka_acls_grants() {
        let r = Resources {
            topics: vec!["t".into()],
            groups: vec!["g".into()],
            transactional_ids: vec!["tx".into()],
            ..Resources::default()
        };
        let mut e = entries(&["User:a"], &[]);
        e.producer = true;
        e.idempotent = true;
        e.consumer = true;
        let acls = bindings(&r, &e, PatternType::Prefixed).unwrap();
        let has = |t: ResourceType, op: AclOperation| {
            acls.iter()
                .any(|a| a.pattern.resource_type == t && a.entry.operation == op)
        };
        for op in [
            AclOperation::Write,
            AclOperation::Describe,
            AclOperation::Create,
            AclOperation::Read,
        ] {
            assert!(has(ResourceType::Topic, op), "{op:?}");
        }
        assert_eq!(
            acls.iter()
                .filter(|x| x.pattern.resource_type == ResourceType::Topic)
                .count(),
            4
        );
        assert!(has(ResourceType::Group, AclOperation::Read));
        assert!(has(ResourceType::TransactionalId, AclOperation::Write));
        assert!(has(ResourceType::Cluster, AclOperation::IdempotentWrite));
        assert!(acls
            .iter()
            .filter(|a| a.pattern.resource_type != ResourceType::Cluster)
            .all(|a| a.pattern.pattern_type == PatternType::Prefixed));
    }

    #[test]
    fn list_filters_one_per_resource_or_everything() {
        let all = resource_filters(&Resources::default(), PatternFilter::Match, Some("User:a"));
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].resource_type, None);
        assert_eq!(all[0].principal.as_deref(), Some("User:a"));
        let r = Resources {
            topics: vec!["t".into()],
            cluster: true,
            ..Resources::default()
        };
        let fs = resource_filters(&r, PatternFilter::Match, None);
        assert_eq!(fs.len(), 2);
        assert_eq!(fs[1].name.as_deref(), Some(CLUSTER_NAME));
        assert_eq!(fs[0].pattern, PatternFilter::Match);
    }
}
