//! The `moldau` binary: `moldau server` runs a broker; `topic`, `produce`, `consume`, `group`,
//! `cluster` and `bench` are the client CLI (see `cli`).

mod cli;
mod config;

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Moldau: a Kafka-compatible streaming platform.
#[derive(Parser, Debug)]
#[command(name = "moldau", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a broker. With no arguments: a single-node cluster on 127.0.0.1:9092, data in
    /// ./moldau-data, topics created on first use.
    Server(ServerArgs),
    #[command(flatten)]
    Client(cli::Command),
}

#[derive(clap::Args, Debug)]
struct ServerArgs {
    /// Data directory (Kafka: log.dirs).
    #[arg(long, env = "MOLDAU_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Address to listen on; port 0 picks a free port (Kafka: listeners).
    #[arg(long, env = "MOLDAU_LISTEN", value_name = "HOST:PORT")]
    listen: Option<String>,
    /// Address clients are told to connect to (Kafka: advertised.listeners).
    #[arg(long, env = "MOLDAU_ADVERTISE", value_name = "HOST:PORT")]
    advertise: Option<String>,
    /// A TOML file of broker configs with Kafka names, e.g. `"log.segment.bytes" = 1048576`.
    #[arg(long, env = "MOLDAU_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Set any broker config by its Kafka name; repeatable. Also MOLDAU_<KEY> env vars,
    /// e.g. MOLDAU_NUM_PARTITIONS=3 for num.partitions.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Server(args) => server(args),
        Command::Client(command) => cli::run(command),
    }
}

fn server(args: ServerArgs) -> ExitCode {
    let config = match config::load(&config::Sources {
        file: args.config.as_deref(),
        env: std::env::vars().collect(),
        set: &args.set,
        data_dir: args.data_dir.as_deref(),
        listen: args.listen.as_deref(),
        advertise: args.advertise.as_deref(),
    }) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("moldau: {e:#}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = init_logging(config.props.get("log.format").map_or("human", |f| f.trim())) {
        eprintln!("moldau: {e}");
        return ExitCode::from(2);
    }
    raise_open_file_limit();
    match run_server(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("moldau: {e:#}");
            // The node's configuration contradicts its data dir or the quorum (node.id,
            // cluster.id): a configuration error, like a bad value.
            let identity = e.chain().any(|c| {
                matches!(
                    c.downcast_ref::<broker::BrokerError>(),
                    Some(broker::BrokerError::Identity(_))
                )
            });
            if identity {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Raises the soft open-file limit to the hard one: every partition holds its segment files
/// open, and each connection takes a descriptor. The broker's partition cap then follows the
/// limit it really has.
fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    if limit.current == limit.maximum {
        return;
    }
    let raised = rustix::process::Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => {
            tracing::info!(from = ?limit.current, to = ?limit.maximum, "raised the open-file limit")
        }
        Err(e) => {
            tracing::warn!(error = %e, limit = ?limit.current, "could not raise the open-file limit")
        }
    }
}

/// Where the admin HTTP listener binds: `admin.listener` when set (empty: no listener),
/// else the client listener's host on a free port.
fn admin_address(config: &model::BrokerConfig) -> anyhow::Result<Option<String>> {
    match config.props.get("admin.listener").map(|v| v.trim()) {
        Some("") => Ok(None),
        Some(addr) => {
            let ok = addr
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            anyhow::ensure!(
                ok,
                "admin.listener {addr:?}: expected HOST:PORT (or empty to turn it off)"
            );
            Ok(Some(addr.to_string()))
        }
        None => {
            let host = config
                .listen
                .rsplit_once(':')
                .map_or("127.0.0.1", |(h, _)| h);
            Ok(Some(format!("{host}:0")))
        }
    }
}

/// What the admin listener reports: metrics of the process, then of the broker once it
/// runs; ready only between the broker's start and the beginning of its shutdown.
#[derive(Default)]
struct AdminEndpoints {
    broker: std::sync::OnceLock<std::sync::Arc<broker::BrokerState>>,
    stopping: std::sync::atomic::AtomicBool,
}

impl admin::Endpoints for AdminEndpoints {
    fn metrics(&self, format: admin::Format) -> String {
        broker::metrics::render(self.broker.get().cloned(), format)
    }

    fn ready(&self) -> Result<(), String> {
        if self.stopping.load(std::sync::atomic::Ordering::Acquire) {
            return Err("shutting down".into());
        }
        match self.broker.get() {
            None => Err("starting: loading metadata and partitions".into()),
            Some(state) => broker::metrics::ready(state),
        }
    }
}

/// Installs the process's log subscriber: human or JSON lines on stderr, filtered by
/// `RUST_LOG` (default `info`) through a reload layer, so log levels change at runtime
/// (BROKER_LOGGER, `broker::loggers`); every target reached is recorded as a logger.
fn init_logging(format: &str) -> Result<(), String> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{fmt, reload, EnvFilter, Layer};

    let base = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
    let (filter, handle) = reload::Layer::new(EnvFilter::new("info"));
    broker::loggers::install(
        &base,
        std::sync::Arc::new(move |directives: &str| {
            handle
                .reload(EnvFilter::new(directives))
                .map_err(|e| e.to_string())
        }),
    );
    // The filter the process starts with: RUST_LOG as the logger list parsed it.
    broker::loggers::apply(Vec::new())?;
    let output = match format {
        "human" => fmt::layer().with_writer(std::io::stderr).boxed(),
        // One JSON object per line: timestamp, level, target, message and the event's fields
        // (partition, error...), with the fields of the spans it happened in.
        "json" => fmt::layer()
            .json()
            .with_current_span(true)
            .with_writer(std::io::stderr)
            .boxed(),
        other => {
            return Err(format!(
                "config 'log.format' = {other:?}: expected human or json"
            ))
        }
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(output)
        .with(TargetRecorder)
        .init();
    Ok(())
}

/// Records the target of every log call site the process reaches (the loggers BROKER_LOGGER
/// lists); it never filters. Its TRACE level hint lets `tracing` register call sites of every
/// level (each is asked once; a disabled one is then skipped on its cached interest).
struct TargetRecorder;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for TargetRecorder {
    fn register_callsite(
        &self,
        metadata: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        if metadata.is_event() {
            broker::loggers::saw_target(metadata.target());
        }
        tracing::subscriber::Interest::always()
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }
}

fn run_server(config: model::BrokerConfig) -> anyhow::Result<()> {
    let partition_series = config
        .props
        .get("metrics.partition.series")
        .map_or("true", |v| v.trim());
    anyhow::ensure!(
        partition_series.eq_ignore_ascii_case("true")
            || partition_series.eq_ignore_ascii_case("false"),
        "metrics.partition.series {partition_series:?}: expected true or false"
    );
    let admin_addr = admin_address(&config)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("moldau")
        .build()
        .context("start tokio runtime")?;
    let result = runtime.block_on(async move {
        // The admin listener comes first, so /health/live answers and /health/ready says
        // "not ready" while the broker loads its partitions.
        let endpoints = std::sync::Arc::new(AdminEndpoints::default());
        let admin = match &admin_addr {
            Some(addr) => Some(
                admin::AdminServer::start(addr, endpoints.clone())
                    .await
                    .with_context(|| format!("bind admin listener {addr}"))?,
            ),
            None => None,
        };
        let data_dir = config.data_dir.clone();
        let handle = broker::Broker::start(config)
            .await
            .with_context(|| format!("start broker (data dir {data_dir})"))?;
        let _ = endpoints.broker.set(handle.state().clone());
        let addr = handle.local_addr();
        let shown_dir = std::fs::canonicalize(handle.data_dir())
            .unwrap_or_else(|_| handle.data_dir().to_path_buf());
        tracing::info!(%addr, data_dir = %shown_dir.display(), "moldau broker ready");
        {
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "moldau: listening on {addr}, data in {}",
                shown_dir.display()
            )
            .context("write to stdout")?;
            if let Some(admin) = &admin {
                writeln!(out, "moldau: admin on http://{}", admin.local_addr())
                    .context("write to stdout")?;
            }
            out.flush().context("flush stdout")?;
        }
        // A signal, or this node's metadata quorum member failing (its metadata log cannot be
        // written): then the node stops with an error, as Kafka halts, rather than serve from
        // metadata it can no longer follow.
        let quorum_failure = tokio::select! {
            r = wait_for_signal() => {
                r?;
                None
            }
            why = handle.quorum_failed() => Some(why),
        };
        match &quorum_failure {
            None => tracing::info!("shutting down"),
            Some(why) => {
                tracing::error!(reason = %why, "the metadata quorum member failed; stopping this node")
            }
        }
        endpoints
            .stopping
            .store(true, std::sync::atomic::Ordering::Release);
        if tokio::time::timeout(std::time::Duration::from_secs(10), handle.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("shutdown took longer than 10s; exiting anyway");
        }
        if let Some(admin) = admin {
            admin.shutdown().await;
        }
        tracing::info!("stopped");
        match quorum_failure {
            None => Ok(()),
            Some(why) => Err(anyhow::anyhow!(
                "stopped: this node's metadata log failed ({why}); repair or restore {}/{} and restart",
                shown_dir.display(),
                broker::METADATA_DIR
            )),
        }
    });
    // A shutdown past its 10 s may leave a log close running on the blocking pool: exit
    // without waiting for it any longer (what is acknowledged is already on disk; the next
    // start recovers the unflushed tail), rather than hang the process.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    result
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("install SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("wait for Ctrl-C")?,
        _ = term.recv() => {}
    }
    Ok(())
}
