//! Crash tests: a child process appends (and sometimes flushes) until the parent kills it
//! with SIGKILL at a random point; reopening must keep every acknowledged batch, in order,
//! with nothing invented.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use bytes::Bytes;
use common::*;
use model::TopicConfig;
use record::{BatchBuilder, Compression, NewRecord};

const CHILD_ENV: &str = "MOLDAU_STORAGE_CRASH_CHILD_DIR";

fn crash_config() -> TopicConfig {
    TopicConfig {
        segment_bytes: 64 * 1024,
        index_interval_bytes: 1024,
        ..TopicConfig::default()
    }
}

/// The child side: runs only when the parent sets `CHILD_ENV`; otherwise returns at once.
#[test]
fn crash_child_entry_point() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let clock = clock();
    let log = open(std::path::Path::new(&dir), crash_config(), &clock);
    let mut out = std::io::stdout().lock();
    for i in 0u64.. {
        let next = log.log_end_offset();
        let n = 1 + (i % 7) as usize;
        let mut b = BatchBuilder::new(Compression::ALL[(i % 5) as usize]);
        for j in 0..n {
            // Each record's value is its own offset, so the parent can check any prefix.
            b.push(NewRecord::value(format!("{}", next + j as i64)).timestamp(T0));
        }
        let info = log.append(b.build().unwrap(), 0).unwrap();
        writeln!(out, "appended {}", info.last_offset).unwrap();
        if i % 10 == 0 {
            log.flush().unwrap();
            writeln!(out, "durable {}", log.durable_offset()).unwrap();
        }
        out.flush().unwrap();
    }
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn killed_writer_loses_nothing_it_acknowledged() {
    let exe = std::env::current_exe().unwrap();
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for round in 0..6 {
        let dir = tempfile::tempdir().unwrap();
        let mut acked = -1i64;
        let mut durable = 0i64;
        // Several crash/restart cycles on the same directory.
        for _cycle in 0..3 {
            let lines_before_kill = 20 + xorshift(&mut seed) % 400;
            let mut child = Command::new(&exe)
                .args([
                    "--exact",
                    "crash_child_entry_point",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, dir.path())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let stdout = child.stdout.take().unwrap();
            let mut seen = 0;
            for line in BufReader::new(stdout).lines() {
                let line = line.unwrap();
                if let Some(v) = line.strip_prefix("appended ") {
                    acked = acked.max(v.parse().unwrap());
                    seen += 1;
                } else if let Some(v) = line.strip_prefix("durable ") {
                    durable = durable.max(v.parse().unwrap());
                }
                if seen >= lines_before_kill {
                    break;
                }
            }
            child.kill().unwrap();
            child.wait().unwrap();

            let clock = clock();
            let log = open(dir.path(), crash_config(), &clock);
            let leo = log.log_end_offset();
            // A killed process loses nothing the kernel accepted; acknowledged and flushed
            // data must be there.
            assert!(leo > acked, "round {round}: leo {leo} acked {acked}");
            assert!(leo >= durable);
            let all = read_all(&log, 0);
            assert_eq!(all.len() as i64, leo);
            for (o, v) in &all {
                assert_eq!(v.as_ref().unwrap(), &Bytes::from(o.to_string()));
            }
            acked = leo - 1;
        }
    }
}
