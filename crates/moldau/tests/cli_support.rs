//! Test support shared by the `cli_*` tests: a real `moldau server` child process on port 0
//! with a temporary data dir, and a runner for `moldau` CLI commands against it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A broker child process; killed (by its own handle) when dropped.
pub struct Server {
    child: Child,
    pub addr: String,
    _dir: Option<tempfile::TempDir>,
}

/// A server that exited before it printed its address: its exit status and stderr.
#[derive(Debug)]
pub struct Refused {
    pub status: std::process::ExitStatus,
    pub stderr: String,
}

impl Server {
    /// Starts `moldau server` with group rebalances not delayed, plus `extra` `--set`s.
    pub fn start(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let mut server = Server::start_in(dir.path(), extra).expect("server started");
        server._dir = Some(dir);
        server
    }

    /// Starts `moldau server` on an existing data dir (kept after the server stops); `Err` if
    /// the process exits before it serves.
    pub fn start_in(data_dir: &std::path::Path, extra: &[&str]) -> Result<Server, Refused> {
        let stderr_file = tempfile::NamedTempFile::new().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_moldau"));
        cmd.args(["server", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(["--set", "group.initial.rebalance.delay.ms=0"]);
        for s in extra {
            cmd.args(["--set", s]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(stderr_file.reopen().unwrap())
            .spawn()
            .expect("spawn moldau server");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next().and_then(Result::ok);
            let _ = tx.send(first);
            // Keep draining so the child never blocks on a full pipe.
            for _ in lines {}
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("server printed its address or exited within 30 s");
        let Some(line) = line else {
            let status = child.wait().unwrap();
            let stderr = std::fs::read_to_string(stderr_file.path()).unwrap_or_default();
            return Err(Refused { status, stderr });
        };
        let addr = line
            .strip_prefix("moldau: listening on ")
            .and_then(|s| s.split(',').next())
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Ok(Server {
            child,
            addr,
            _dir: None,
        })
    }

    /// Stops the server with SIGTERM and waits for it (a clean shutdown).
    pub fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }

    pub fn client_config(&self) -> client::ClientConfig {
        let mut c = client::ClientConfig::new(&self.addr);
        c.request_timeout_ms = 15_000;
        c
    }

    /// Runs `moldau ARGS` against this broker with `stdin`, returning its output.
    pub fn cli(&self, args: &[&str], stdin: &str) -> Output {
        let mut child = Command::new(env!("CARGO_BIN_EXE_moldau"))
            .args(args)
            .env("MOLDAU_BROKERS", &self.addr)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn moldau");
        let mut input = child.stdin.take().unwrap();
        let data = stdin.as_bytes().to_vec();
        let writer = std::thread::spawn(move || {
            let _ = input.write_all(&data);
        });
        let pid = child.id();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let out = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(out) => out.expect("wait for moldau"),
            Err(_) => {
                // Kill only the CLI child we started, by its PID.
                let _ = Command::new("kill").arg(pid.to_string()).status();
                panic!("moldau {args:?} did not finish within 120 s");
            }
        };
        writer.join().unwrap();
        out
    }

    /// Runs a CLI command that must succeed; returns its stdout.
    pub fn ok(&self, args: &[&str], stdin: &str) -> String {
        let out = self.cli(args, stdin);
        assert!(
            out.status.success(),
            "moldau {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `f` until it returns `Some`, failing after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::task::yield_now().await;
    }
}
