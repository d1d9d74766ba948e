//! `moldau quota describe|alter`: client quotas, what `kafka-configs.sh --describe / --alter
//! --entity-type users|clients|ips` does for quotas, over DescribeClientQuotas /
//! AlterClientQuotas (APIs 48/49; works against Kafka too). An entity is a user and/or a
//! client id (each a name or the default), or an IP.

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use client::{QuotaEntity, QuotaMatch, QuotaOp};
use serde_json::json;

use super::output::{print_json, Table};
use super::Common;

/// The entity flags, as kafka-configs names them.
#[derive(Args, Debug, Clone, Default)]
pub struct EntityArgs {
    /// A user (its principal name, e.g. alice for User:alice); with --client, that user's
    /// client.
    #[arg(long, value_name = "NAME", conflicts_with = "user_defaults")]
    pub user: Option<String>,
    /// The default user: the quota of each user without one of its own.
    #[arg(long)]
    pub user_defaults: bool,
    /// A client id.
    #[arg(long, value_name = "CLIENT_ID", conflicts_with = "client_defaults")]
    pub client: Option<String>,
    /// The default client id.
    #[arg(long)]
    pub client_defaults: bool,
    /// An IP address (not together with --user or --client).
    #[arg(long, value_name = "ADDRESS", conflicts_with_all = ["ip_defaults", "user", "user_defaults", "client", "client_defaults"])]
    pub ip: Option<String>,
    /// The default IP.
    #[arg(long, conflicts_with_all = ["user", "user_defaults", "client", "client_defaults"])]
    pub ip_defaults: bool,
}

const USER: &str = "user";
const CLIENT_ID: &str = "client-id";
const IP: &str = "ip";

impl EntityArgs {
    /// The (entity type, name or default) pairs the flags name.
    fn pairs(&self) -> Vec<(&'static str, Option<String>)> {
        let mut out = Vec::new();
        for (ty, name, default) in [
            (USER, &self.user, self.user_defaults),
            (CLIENT_ID, &self.client, self.client_defaults),
            (IP, &self.ip, self.ip_defaults),
        ] {
            if let Some(n) = name {
                out.push((ty, Some(n.clone())));
            } else if default {
                out.push((ty, None));
            }
        }
        out
    }
}

#[derive(Subcommand, Debug)]
pub enum QuotaCommand {
    /// Show client quotas: all of them, or those of the entities named.
    ///
    /// `--user alice` shows alice's quotas and, without --strict, those of alice's clients
    /// too; a default entity prints as `<default>` (`user=alice,client-id=<default>`).
    Describe {
        #[command(flatten)]
        entity: EntityArgs,
        /// Only entities with exactly the types named (`--user alice`: not alice's clients).
        #[arg(long)]
        strict: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Set or remove quotas of one entity.
    ///
    /// Keys for users and client ids: producer_byte_rate and consumer_byte_rate (bytes/s,
    /// integers), request_percentage (percent of one request handler thread's time),
    /// controller_mutation_rate (partition mutations/s). For IPs: connection_creation_rate
    /// (connections/s; Kafka enforces it, Moldau stores it but does not enforce it yet).
    /// The broker checks the values and its refusal is this command's error.
    ///
    /// Example: `moldau quota alter --user alice --client-defaults --add-config
    /// producer_byte_rate=1048576,consumer_byte_rate=2097152`.
    Alter {
        #[command(flatten)]
        entity: EntityArgs,
        /// KEY=VALUE[,KEY=VALUE...] to set; repeatable.
        #[arg(long = "add-config", value_name = "KEY=VALUE,...")]
        add: Vec<String>,
        /// KEY[,KEY...] to remove; repeatable.
        #[arg(long = "delete-config", value_name = "KEY,...")]
        delete: Vec<String>,
        /// Let the broker check the change without applying it.
        #[arg(long)]
        validate_only: bool,
        #[command(flatten)]
        common: Common,
    },
}

/// The changes `--add-config` and `--delete-config` ask for, in order.
fn ops(add: &[String], delete: &[String]) -> anyhow::Result<Vec<QuotaOp>> {
    let mut out = Vec::new();
    let items = |v: &[String]| -> Vec<String> {
        v.iter()
            .flat_map(|s| s.split(','))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    };
    for kv in items(add) {
        let (k, v) = super::parse_kv(&kv)?;
        let value: f64 = v
            .trim()
            .parse()
            .with_context(|| format!("{k}: {v:?} is not a number"))?;
        out.push((k.trim().to_string(), Some(value)));
    }
    for k in items(delete) {
        out.push((k, None));
    }
    Ok(out)
}

/// `user=alice,client-id=<default>`, as kafka-configs prints an entity.
fn entity_text(entity: &QuotaEntity) -> String {
    entity
        .iter()
        .map(|(t, n)| format!("{t}={}", n.as_deref().unwrap_or("<default>")))
        .collect::<Vec<_>>()
        .join(",")
}

/// Quota values print as integers when they are (byte rates), else as decimals.
fn value_text(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

pub async fn run(cmd: QuotaCommand) -> anyhow::Result<()> {
    match cmd {
        QuotaCommand::Describe {
            entity,
            strict,
            common,
        } => {
            let components: Vec<(String, QuotaMatch)> = entity
                .pairs()
                .into_iter()
                .map(|(t, n)| {
                    let m = match n {
                        Some(n) => QuotaMatch::Exact(n),
                        None => QuotaMatch::Default,
                    };
                    (t.to_string(), m)
                })
                .collect();
            let admin = common.admin().await?;
            let found = admin
                .describe_client_quotas(&components, strict)
                .await
                .context("describe client quotas")?;
            if common.json {
                print_json(&json!(found
                    .iter()
                    .map(|q| json!({
                        "entity": q.entity.iter().map(|(t, n)| json!({"type": t, "name": n}))
                            .collect::<Vec<_>>(),
                        "quotas": q.values,
                    }))
                    .collect::<Vec<_>>()))?;
            } else {
                let mut table = Table::new(&["ENTITY", "QUOTA", "VALUE"]);
                for q in &found {
                    for (k, v) in &q.values {
                        table.row(vec![entity_text(&q.entity), k.clone(), value_text(*v)]);
                    }
                }
                table.print()?;
            }
        }
        QuotaCommand::Alter {
            entity,
            add,
            delete,
            validate_only,
            common,
        } => {
            let entity: QuotaEntity = entity
                .pairs()
                .into_iter()
                .map(|(t, n)| (t.to_string(), n))
                .collect();
            if entity.is_empty() {
                bail!("name the entity: --user, --client (or their --*-defaults), or --ip");
            }
            let ops = ops(&add, &delete)?;
            if ops.is_empty() {
                bail!("nothing to change: give --add-config KEY=VALUE or --delete-config KEY");
            }
            let admin = common.admin().await?;
            admin
                .alter_client_quotas(&entity, &ops, validate_only)
                .await
                .with_context(|| format!("alter the quotas of {}", entity_text(&entity)))?;
            let set: Vec<String> = ops
                .iter()
                .filter_map(|(k, v)| v.map(|v| format!("{k}={}", value_text(v))))
                .collect();
            let removed: Vec<&str> = ops
                .iter()
                .filter(|(_, v)| v.is_none())
                .map(|(k, _)| k.as_str())
                .collect();
            if common.json {
                print_json(&json!({
                    "entity": entity.iter().map(|(t, n)| json!({"type": t, "name": n}))
                        .collect::<Vec<_>>(),
                    "set": ops.iter().filter_map(|(k, v)| v.map(|v| (k.clone(), v)))
                        .collect::<std::collections::BTreeMap<_, _>>(),
                    "removed": removed,
                    "validate_only": validate_only,
                }))?;
            } else {
                let what = if validate_only { "valid" } else { "altered" };
                let mut parts = Vec::new();
                if !set.is_empty() {
                    parts.push(format!("set {}", set.join(", ")));
                }
                if !removed.is_empty() {
                    parts.push(format!("removed {}", removed.join(", ")));
                }
                println!(
                    "quotas of {} {what}: {}",
                    entity_text(&entity),
                    parts.join("; ")
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_parse_as_kafka_configs_writes_them() {
        let o = ops(
            &[
                "producer_byte_rate=1024, consumer_byte_rate=2048".into(),
                "request_percentage=12.5".into(),
            ],
            &["controller_mutation_rate".into()],
        )
        .unwrap();
        assert_eq!(
            o,
            vec![
                ("producer_byte_rate".to_string(), Some(1024.0)),
                ("consumer_byte_rate".to_string(), Some(2048.0)),
                ("request_percentage".to_string(), Some(12.5)),
                ("controller_mutation_rate".to_string(), None),
            ]
        );
        assert!(ops(&["producer_byte_rate=fast".into()], &[]).is_err());
        assert!(ops(&["producer_byte_rate".into()], &[]).is_err());
    }

    #[test]
    fn an_ip_is_never_combined_with_a_user_or_client() {
        use clap::Parser;
        #[derive(Parser, Debug)]
        struct Cli {
            #[command(subcommand)]
            quota: QuotaCommand,
        }
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("quota").chain(args.iter().copied()))
        };
        assert!(parse(&["describe", "--ip", "10.0.0.1"]).is_ok());
        assert!(parse(&["describe", "--user", "alice", "--client-defaults"]).is_ok());
        assert!(parse(&["describe", "--ip", "10.0.0.1", "--user", "alice"]).is_err());
        assert!(parse(&["describe", "--ip-defaults", "--client", "c"]).is_err());
        assert!(parse(&["describe", "--user", "alice", "--user-defaults"]).is_err());
    }

    #[test]
    fn entities_print_with_kafkas_default_marker() {
        let e = EntityArgs {
            user: Some("alice".into()),
            client_defaults: true,
            ..EntityArgs::default()
        };
        let entity: QuotaEntity = e
            .pairs()
            .into_iter()
            .map(|(t, n)| (t.to_string(), n))
            .collect();
        assert_eq!(entity_text(&entity), "user=alice,client-id=<default>");
        assert_eq!(value_text(1024.0), "1024");
        assert_eq!(value_text(12.5), "12.5");
    }
}
