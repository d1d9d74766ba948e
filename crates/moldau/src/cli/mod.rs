//! The operator and developer CLI (`moldau topic|produce|consume|group|cluster|txn|acl|user|quota|bench`), built
//! only on the `client` crate so it works against any Kafka-compatible broker.

mod acl;
mod bench;
mod cluster;
mod cluster_start;
mod consume;
mod group;
mod output;
mod produce;
mod quota;
mod reassign;
mod topic;
mod txn;
mod user;

use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;

/// Flags every client subcommand takes.
#[derive(clap::Args, Debug, Clone)]
pub struct Common {
    /// Comma-separated bootstrap brokers.
    #[arg(
        long,
        short = 'b',
        alias = "bootstrap-server",
        env = "MOLDAU_BROKERS",
        default_value = "127.0.0.1:9092",
        value_name = "HOST:PORT,..."
    )]
    pub brokers: String,
    /// Machine-readable JSON output instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Per-request timeout in milliseconds.
    #[arg(long, default_value_t = 30_000, value_name = "MS")]
    pub timeout_ms: u64,
    /// A client properties file, as Kafka's tools take it: `security.protocol`
    /// (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), `sasl.mechanism` (PLAIN, SCRAM-SHA-256,
    /// SCRAM-SHA-512), `sasl.jaas.config` with `username="..." password="..."` (or
    /// `sasl.username` / `sasl.password`), `ssl.truststore.location` (PEM CA file, or
    /// `ssl.ca.location`), `ssl.keystore.location` (PEM certificate chain and key, for mTLS),
    /// `ssl.endpoint.identification.algorithm` (https, or empty), `client.id`.
    #[arg(long, env = "MOLDAU_COMMAND_CONFIG", value_name = "FILE")]
    pub command_config: Option<std::path::PathBuf>,
}

impl Common {
    pub fn client_config(&self) -> anyhow::Result<client::ClientConfig> {
        let mut c = client::ClientConfig::new(&self.brokers);
        c.client_id = "moldau-cli".into();
        c.request_timeout_ms = self.timeout_ms;
        c.connect_timeout_ms = self.timeout_ms.min(10_000);
        if let Some(path) = &self.command_config {
            let props = read_properties(path)
                .with_context(|| format!("read --command-config {}", path.display()))?;
            c.security = client::Security::from_properties(&props)
                .with_context(|| format!("--command-config {}", path.display()))?;
            if let Some(id) = props.get("client.id") {
                c.client_id = id.clone();
            }
        }
        Ok(c)
    }

    pub async fn admin(&self) -> anyhow::Result<client::Admin> {
        client::Admin::connect(self.client_config()?)
            .await
            .with_context(|| format!("connect to {}", self.brokers))
    }
}

/// Reads a Java properties file: `key=value` or `key: value` lines, `#` and `!` comments,
/// a trailing backslash continuing the value on the next line.
pub fn read_properties(
    path: &std::path::Path,
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let text = std::fs::read_to_string(path)?;
    Ok(parse_properties(&text))
}

fn parse_properties(text: &str) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.trim_start();
        if pending.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with('!'))
        {
            continue;
        }
        let trailing = line.len() - line.trim_end_matches('\\').len();
        if trailing % 2 == 1 {
            pending.push_str(&line[..line.len() - 1]);
            continue;
        }
        pending.push_str(line);
        let entry = std::mem::take(&mut pending);
        let split = entry.find(['=', ':']);
        let (k, v) = match split {
            Some(i) => (&entry[..i], &entry[i + 1..]),
            None => (entry.as_str(), ""),
        };
        out.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn properties_files_parse_as_java_reads_them() {
        let p = super::parse_properties(
            "# comment\n! also\nsecurity.protocol=SASL_SSL\nsasl.mechanism : PLAIN\n\nsasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n   username=\"a\" password=\"b=c\";\n",
        );
        assert_eq!(p["security.protocol"], "SASL_SSL");
        assert_eq!(p["sasl.mechanism"], "PLAIN");
        assert_eq!(
            p["sasl.jaas.config"],
            "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"a\" password=\"b=c\";"
        );
    }
}

/// The client subcommands, flattened into `moldau`'s top level.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create, list, describe, delete and configure topics.
    #[command(subcommand)]
    Topic(topic::TopicCommand),
    /// Write records from stdin (one per line) to a topic.
    Produce(produce::ProduceArgs),
    /// Read records from a topic (follows new records until Ctrl-C by default).
    Consume(consume::ConsumeArgs),
    /// List, describe, reset offsets of and delete consumer groups.
    #[command(subcommand)]
    Group(group::GroupCommand),
    /// Show brokers, controller and quorum; start a local N-node cluster.
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
    /// List, describe and abort transactions; show a partition's producers.
    #[command(subcommand)]
    Txn(txn::TxnCommand),
    /// Add, list and remove ACLs (as kafka-acls.sh: --allow-principal, --operation, --topic...).
    #[command(subcommand)]
    Acl(acl::AclCommand),
    /// Add, list and delete SCRAM users (SCRAM-SHA-256/512 credentials).
    #[command(subcommand)]
    User(user::UserCommand),
    /// Describe and alter client quotas (as kafka-configs.sh --entity-type users/clients/ips).
    #[command(subcommand)]
    Quota(quota::QuotaCommand),
    /// Load generator: produce, consume or end-to-end throughput and latency.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

/// Runs a client subcommand on a fresh runtime; errors print as one line, exit code 1.
pub fn run(command: Command) -> ExitCode {
    let log_filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(log_filter)
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("moldau: start tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match command {
            Command::Topic(c) => topic::run(c).await,
            Command::Produce(a) => produce::run(a).await,
            Command::Consume(a) => consume::run(a).await,
            Command::Group(c) => group::run(c).await,
            Command::Cluster(c) => cluster::run(c).await,
            Command::Txn(c) => txn::run(c).await,
            Command::Acl(c) => acl::run(c).await,
            Command::User(c) => user::run(c).await,
            Command::Quota(c) => quota::run(c).await,
            Command::Bench(c) => bench::run(c).await,
        }
    });
    // Don't wait for background fetches or heartbeats still parked in the runtime.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("moldau: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Parses `key=value`.
pub fn parse_kv(s: &str) -> anyhow::Result<(String, String)> {
    let (k, v) = s
        .split_once('=')
        .with_context(|| format!("expected KEY=VALUE, got {s:?}"))?;
    Ok((k.to_owned(), v.to_owned()))
}
