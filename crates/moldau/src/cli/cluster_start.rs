//! `moldau cluster start`: a local N-node cluster for development — child `moldau server`
//! processes (each a broker and a controller voter), data and logs under one folder, the
//! bootstrap list printed once every node sees the whole cluster; Ctrl-C stops them all.

use std::fs::OpenOptions;
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// How long the nodes get to form the cluster before the command gives up.
const FORM_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a node gets for its controlled shutdown after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(clap::Args, Debug)]
pub struct StartArgs {
    /// Number of nodes; each is a broker and a controller voter.
    #[arg(long, short = 'n', default_value_t = 3, value_name = "N")]
    pub nodes: u16,
    /// Folder of every node's data dir (`node-<id>`) and log (`node-<id>.log`); kept between
    /// runs, so a restarted cluster keeps its topics.
    #[arg(long, default_value = "./moldau-cluster", value_name = "DIR")]
    pub data_dir: PathBuf,
    /// Host the nodes listen on and advertise.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Node i serves clients on BASE+i-1 and its controller listener on BASE+100+i-1; 0 picks
    /// free ports.
    #[arg(long, default_value_t = 9092, value_name = "BASE")]
    pub base_port: u16,
    /// A broker config (Kafka name) for every node; repeatable, e.g. `--set num.partitions=6`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

struct Node {
    id: u16,
    client: String,
    controller: String,
    log: PathBuf,
    child: Option<Child>,
}

/// Ports for `n` nodes: (client, controller) each.
fn ports(host: &str, base: u16, n: u16) -> anyhow::Result<Vec<(u16, u16)>> {
    if base != 0 {
        let last = u32::from(base) + 100 + u32::from(n);
        anyhow::ensure!(
            last <= u32::from(u16::MAX),
            "--base-port {base}: the controller ports of {n} nodes would pass 65535"
        );
        return Ok((0..n).map(|i| (base + i, base + 100 + i)).collect());
    }
    // Held until all are chosen, so no port is handed out twice.
    let held: Vec<TcpListener> = (0..2 * n)
        .map(|_| TcpListener::bind((host, 0)).with_context(|| format!("bind {host}:0")))
        .collect::<anyhow::Result<_>>()?;
    let mut picked = Vec::new();
    for pair in held.chunks(2) {
        picked.push((pair[0].local_addr()?.port(), pair[1].local_addr()?.port()));
    }
    Ok(picked)
}

fn spawn(node: &Node, args: &StartArgs, voters: &str, dir: &Path) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("find the moldau executable")?;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&node.log)
        .with_context(|| format!("open {}", node.log.display()))?;
    let err = log.try_clone().context("duplicate the log file handle")?;
    let mut cmd = Command::new(exe);
    cmd.arg("server")
        .arg("--data-dir")
        .arg(dir.join(format!("node-{}", node.id)));
    let mut settings = vec![
        format!("node.id={}", node.id),
        "process.roles=broker,controller".to_string(),
        format!(
            "listeners=PLAINTEXT://{},CONTROLLER://{}",
            node.client, node.controller
        ),
        format!("advertised.listeners=PLAINTEXT://{}", node.client),
        format!("controller.quorum.voters={voters}"),
    ];
    if args.nodes >= 3 {
        // Kafka's defaults for internal topics are RF 3; with fewer nodes they stay at 1.
        settings.push("offsets.topic.replication.factor=3".into());
        settings.push("transaction.state.log.replication.factor=3".into());
    }
    settings.extend(args.set.iter().cloned());
    for s in settings {
        cmd.arg("--set").arg(s);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(err));
    cmd.spawn()
        .with_context(|| format!("start node {}", node.id))
}

fn terminate(child: &Child) {
    if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
}

/// Stops every node still running: SIGTERM (a controlled shutdown), then a kill after
/// [`STOP_TIMEOUT`].
fn stop_all(nodes: &mut [Node]) {
    for n in nodes.iter() {
        if let Some(c) = &n.child {
            terminate(c);
        }
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    for n in nodes.iter_mut() {
        let Some(mut c) = n.child.take() else {
            continue;
        };
        loop {
            match c.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() >= deadline => {
                    eprintln!("moldau: node {} did not stop in time; killing it", n.id);
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

/// The last lines of a node's log, for a node that stopped on its own.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
}

/// Reaps nodes that exited on their own; says so once for each.
fn reap(nodes: &mut [Node]) {
    for n in nodes.iter_mut() {
        let exited = n.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
        if let Some(status) = exited {
            n.child = None;
            eprintln!(
                "moldau: node {} exited ({status}); the others keep running. Its log ({}) ends:\n{}",
                n.id,
                n.log.display(),
                log_tail(&n.log)
            );
        }
    }
}

/// Whether `address` answers Metadata listing `n` brokers.
async fn sees_cluster(address: &str, n: u16) -> bool {
    let mut config = client::ClientConfig::new(address);
    config.client_id = "moldau-cluster-start".into();
    config.request_timeout_ms = 2_000;
    config.connect_timeout_ms = 1_000;
    let Ok(admin) = client::Admin::connect(config).await else {
        return false;
    };
    admin
        .describe_cluster()
        .await
        .is_ok_and(|info| info.brokers.len() == usize::from(n))
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

pub async fn run(args: StartArgs) -> anyhow::Result<()> {
    if args.nodes == 0 || args.nodes > 99 {
        bail!("--nodes {}: expected 1 to 99", args.nodes);
    }
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("create {}", args.data_dir.display()))?;
    let dir = std::fs::canonicalize(&args.data_dir)
        .with_context(|| format!("resolve {}", args.data_dir.display()))?;
    let ports = ports(&args.host, args.base_port, args.nodes)?;
    let mut nodes: Vec<Node> = ports
        .iter()
        .zip(1u16..)
        .map(|((client, controller), id)| Node {
            id,
            client: format!("{}:{client}", args.host),
            controller: format!("{}:{controller}", args.host),
            log: dir.join(format!("node-{id}.log")),
            child: None,
        })
        .collect();
    let voters = nodes
        .iter()
        .map(|n| format!("{}@{}", n.id, n.controller))
        .collect::<Vec<_>>()
        .join(",");
    for i in 0..nodes.len() {
        match spawn(&nodes[i], &args, &voters, &dir) {
            Ok(c) => nodes[i].child = Some(c),
            Err(e) => {
                stop_all(&mut nodes);
                return Err(e);
            }
        }
    }
    let bootstrap = nodes
        .iter()
        .map(|n| n.client.as_str())
        .collect::<Vec<_>>()
        .join(",");
    {
        let mut out = std::io::stdout().lock();
        for n in &nodes {
            let pid = n.child.as_ref().map_or(0, Child::id);
            writeln!(
                out,
                "moldau: node {} on {} (controller {}), pid {pid}, log {}",
                n.id,
                n.client,
                n.controller,
                n.log.display()
            )?;
        }
        out.flush()?;
    }

    // Formed once every node lists every broker; a node that stops meanwhile ends it.
    let deadline = Instant::now() + FORM_TIMEOUT;
    loop {
        let stopped = nodes.iter_mut().position(|n| {
            n.child
                .as_mut()
                .is_some_and(|c| !matches!(c.try_wait(), Ok(None)))
        });
        if let Some(i) = stopped {
            let (id, log) = (nodes[i].id, nodes[i].log.clone());
            nodes[i].child = None;
            stop_all(&mut nodes);
            bail!(
                "node {id} stopped while the cluster formed; its log ({}) ends:\n{}",
                log.display(),
                log_tail(&log)
            );
        }
        let mut formed = true;
        for n in &nodes {
            if !sees_cluster(&n.client, args.nodes).await {
                formed = false;
                break;
            }
        }
        if formed {
            break;
        }
        if Instant::now() >= deadline {
            stop_all(&mut nodes);
            bail!(
                "the {} nodes did not form a cluster within {}s; see the logs in {}",
                args.nodes,
                FORM_TIMEOUT.as_secs(),
                dir.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "moldau: cluster of {} nodes ready, bootstrap {bootstrap} (Ctrl-C stops every node)",
            args.nodes
        )?;
        out.flush()?;
    }

    // Serve until a signal; a node that dies (kill -9 it to watch a failover) is reported and
    // the others keep running.
    let signal = wait_for_signal();
    tokio::pin!(signal);
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            r = &mut signal => {
                r?;
                break;
            }
            _ = tick.tick() => {
                reap(&mut nodes);
                if nodes.iter().all(|n| n.child.is_none()) {
                    bail!("every node has stopped; logs in {}", dir.display());
                }
            }
        }
    }
    stop_all(&mut nodes);
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "moldau: stopped; data and logs kept in {}",
        dir.display()
    )?;
    out.flush()?;
    Ok(())
}
