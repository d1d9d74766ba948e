//! `moldau user add|list|delete`: SCRAM users, what `kafka-configs.sh --entity-type users
//! --add-config 'SCRAM-SHA-256=[iterations=N,password=P]'` does, over
//! AlterUserScramCredentials / DescribeUserScramCredentials (works against Kafka too). The
//! salted password is computed by the CLI with a fresh random salt; the password itself is
//! never sent nor printed.

use std::io::BufRead;

use anyhow::{bail, Context};
use clap::Subcommand;
use client::{ScramMechanism, ScramUpsert};
use serde_json::json;

use super::output::{print_json, Table};
use super::Common;

#[derive(Subcommand, Debug)]
pub enum UserCommand {
    /// Create a SCRAM user, or replace its credentials (its password) for the mechanisms given.
    ///
    /// Example: `moldau user add alice --password-stdin --mechanism SCRAM-SHA-512 <<< secret`.
    Add {
        /// The user name (its principal is `User:<name>`).
        name: String,
        /// The password (visible to other local users in the process list: prefer
        /// --password-stdin or MOLDAU_USER_PASSWORD).
        #[arg(
            long,
            env = "MOLDAU_USER_PASSWORD",
            hide_env_values = true,
            conflicts_with = "password_stdin"
        )]
        password: Option<String>,
        /// Read the password from the first line of stdin.
        #[arg(long)]
        password_stdin: bool,
        /// SCRAM-SHA-256 or SCRAM-SHA-512; repeatable; default both.
        #[arg(long = "mechanism", value_name = "MECHANISM")]
        mechanisms: Vec<String>,
        /// PBKDF2 iterations (Kafka accepts 4096..=16384).
        #[arg(long, default_value_t = 4096)]
        iterations: u32,
        #[command(flatten)]
        common: Common,
    },
    /// List SCRAM users and their mechanisms and iterations (all users, or those named).
    List {
        /// Only these users.
        names: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Delete a user's SCRAM credentials (those of the mechanisms given, default all it has).
    Delete {
        /// The user name.
        name: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512; repeatable; default every mechanism the user has.
        #[arg(long = "mechanism", value_name = "MECHANISM")]
        mechanisms: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
}

fn mechanisms(names: &[String]) -> anyhow::Result<Vec<ScramMechanism>> {
    let mut out = Vec::new();
    for n in names {
        let m = ScramMechanism::from_name(&n.to_ascii_uppercase()).with_context(|| {
            format!("unknown mechanism {n:?}: expected SCRAM-SHA-256 or SCRAM-SHA-512")
        })?;
        if !out.contains(&m) {
            out.push(m);
        }
    }
    Ok(out)
}

fn read_password(password: Option<String>, stdin: bool) -> anyhow::Result<String> {
    let p = if stdin {
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .context("read the password from stdin")?;
        line.trim_end_matches(['\r', '\n']).to_string()
    } else {
        password
            .context("give the password: --password-stdin, --password or MOLDAU_USER_PASSWORD")?
    };
    if p.is_empty() {
        bail!("the password is empty");
    }
    Ok(p)
}

pub async fn run(cmd: UserCommand) -> anyhow::Result<()> {
    match cmd {
        UserCommand::Add {
            name,
            password,
            password_stdin,
            mechanisms: names,
            iterations,
            common,
        } => {
            let mut ms = mechanisms(&names)?;
            if ms.is_empty() {
                ms = ScramMechanism::ALL.to_vec();
            }
            let password = read_password(password, password_stdin)?;
            let upserts: Vec<ScramUpsert> = ms
                .iter()
                .map(|m| ScramUpsert {
                    user: name.clone(),
                    mechanism: *m,
                    iterations,
                    password: password.clone(),
                })
                .collect();
            let admin = common.admin().await?;
            // One mechanism per request: Kafka refuses a user named twice in one request.
            for u in &upserts {
                let results = admin
                    .alter_user_scram_credentials(std::slice::from_ref(u), &[])
                    .await
                    .context("alter SCRAM credentials")?;
                check_results(&results)?;
            }
            let names: Vec<&str> = ms.iter().map(|m| m.name()).collect();
            if common.json {
                print_json(&json!({"user": name, "mechanisms": names, "iterations": iterations}))?;
            } else {
                println!(
                    "user {name}: {} ({iterations} iterations)",
                    names.join(", ")
                );
            }
        }
        UserCommand::List { names, common } => {
            let admin = common.admin().await?;
            let filter = (!names.is_empty()).then_some(names.as_slice());
            let users = admin
                .describe_user_scram_credentials(filter)
                .await
                .context("describe SCRAM credentials")?;
            let mut errors = Vec::new();
            let mut rows = Vec::new();
            for (user, r) in users {
                match r {
                    Ok(u) => rows.push(u),
                    Err(e) => errors.push(format!("{user}: {e}")),
                }
            }
            if common.json {
                print_json(&json!(rows
                    .iter()
                    .map(
                        |u| json!({"user": u.user, "credentials": u.credentials.iter()
                        .map(|(m, i)| json!({"mechanism": m.name(), "iterations": i}))
                        .collect::<Vec<_>>()})
                    )
                    .collect::<Vec<_>>()))?;
            } else {
                let mut table = Table::new(&["USER", "MECHANISM", "ITERATIONS"]);
                for u in &rows {
                    for (m, i) in &u.credentials {
                        table.row(vec![u.user.clone(), m.name().to_string(), i.to_string()]);
                    }
                }
                table.print()?;
            }
            if !errors.is_empty() {
                bail!("{}", errors.join("; "));
            }
        }
        UserCommand::Delete {
            name,
            mechanisms: names,
            common,
        } => {
            let admin = common.admin().await?;
            let mut ms = mechanisms(&names)?;
            if ms.is_empty() {
                let found = admin
                    .describe_user_scram_credentials(Some(std::slice::from_ref(&name)))
                    .await
                    .context("describe SCRAM credentials")?;
                for (_, r) in found {
                    let u = r.with_context(|| format!("user {name}"))?;
                    ms.extend(u.credentials.iter().map(|(m, _)| *m));
                }
            }
            for m in &ms {
                let results = admin
                    .alter_user_scram_credentials(&[], &[(name.clone(), *m)])
                    .await
                    .context("delete SCRAM credentials")?;
                check_results(&results)?;
            }
            let names: Vec<&str> = ms.iter().map(|m| m.name()).collect();
            if common.json {
                print_json(&json!({"user": name, "deleted": names}))?;
            } else {
                println!("user {name}: deleted {}", names.join(", "));
            }
        }
    }
    Ok(())
}

fn check_results(results: &[(String, client::Result<()>)]) -> anyhow::Result<()> {
    let failed: Vec<String> = results
        .iter()
        .filter_map(|(u, r)| r.as_ref().err().map(|e| format!("{u}: {e}")))
        .collect();
    if !failed.is_empty() {
        bail!("{}", failed.join("; "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn mechanisms_parse_case_insensitively_once_each() {
        let ms = super::mechanisms(&[
            "scram-sha-512".into(),
            "SCRAM-SHA-256".into(),
            "SCRAM-SHA-512".into(),
        ])
        .unwrap();
        assert_eq!(ms.len(), 2);
        assert!(super::mechanisms(&["PLAIN".into()]).is_err());
    }
}
