//! Model test: random appends, reads, truncations, rolls, retention, DeleteRecords and
//! reopens (clean and unclean), checked after every step against an in-memory log.
#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use common::*;
use model::TopicConfig;
use proptest::prelude::*;
use record::{BatchBuilder, Compression, NewRecord};
use storage::Log;

#[derive(Clone, Debug)]
enum Op {
    Append { n: usize, codec: u8 },
    Read { at: u16, max_bytes: u16 },
    Truncate { at: u16 },
    AdvanceClock,
    RetainBytes { bytes: u16 },
    DeleteRecords { at: u16 },
    Reopen { clean: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..6, 0u8..5).prop_map(|(n, codec)| Op::Append { n, codec }),
        3 => (any::<u16>(), 1u16..2000).prop_map(|(at, max_bytes)| Op::Read { at, max_bytes }),
        1 => any::<u16>().prop_map(|at| Op::Truncate { at }),
        1 => Just(Op::AdvanceClock),
        1 => (500u16..6000).prop_map(|bytes| Op::RetainBytes { bytes }),
        1 => any::<u16>().prop_map(|at| Op::DeleteRecords { at }),
        1 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
    ]
}

#[derive(Default)]
struct Model {
    batches: Vec<(i64, Vec<String>)>,
    start: i64,
    leo: i64,
    counter: usize,
}

impl Model {
    fn records_from(&self, from: i64) -> Vec<(i64, Option<Bytes>)> {
        let mut out = Vec::new();
        for (base, vals) in &self.batches {
            for (i, v) in vals.iter().enumerate() {
                let o = base + i as i64;
                if o >= from {
                    out.push((o, Some(Bytes::from(v.clone()))));
                }
            }
        }
        out
    }

    fn pick(&self, at: u16) -> i64 {
        let span = self.leo - self.start + 1;
        self.start + i64::from(at) % span
    }
}

fn cfg() -> TopicConfig {
    TopicConfig {
        segment_bytes: 1500,
        segment_ms: 10_000,
        index_interval_bytes: 100,
        ..TopicConfig::default()
    }
}

fn check(log: &Log, m: &Model) {
    assert_eq!(log.log_end_offset(), m.leo);
    assert_eq!(log.log_start_offset(), m.start);
    assert_eq!(read_all(log, m.start), m.records_from(m.start));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn log_matches_model(ops in proptest::collection::vec(op(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let clock = clock();
        let mut config = cfg();
        let mut log = Some(open(dir.path(), config.clone(), &clock));
        let mut m = Model::default();
        for op in ops {
            let l = log.as_ref().unwrap();
            match op {
                Op::Append { n, codec } => {
                    let mut b = BatchBuilder::new(Compression::from_id(codec).unwrap());
                    let mut vals = Vec::new();
                    for _ in 0..n {
                        let v = format!("r{}", m.counter);
                        m.counter += 1;
                        b.push(NewRecord::value(v.clone()).timestamp(clock.now()));
                        vals.push(v);
                    }
                    let info = l.append(b.build().unwrap(), 1).unwrap();
                    prop_assert_eq!(info.base_offset, m.leo);
                    m.batches.push((m.leo, vals));
                    m.leo += n as i64;
                }
                Op::Read { at, max_bytes } => {
                    let o = m.pick(at);
                    let r = l.read(o, max_bytes as usize, i64::MAX, true).unwrap();
                    if o == m.leo {
                        prop_assert!(r.data.is_empty());
                    } else {
                        prop_assert!(r.first_offset <= o && r.next_offset > o);
                        let got = records(&r.data);
                        let want: Vec<_> = m.records_from(r.first_offset.max(m.start))
                            .into_iter()
                            .filter(|(x, _)| *x < r.next_offset)
                            .collect();
                        let got: Vec<_> = got.into_iter().filter(|(x, _)| *x >= m.start).collect();
                        prop_assert_eq!(got, want);
                    }
                }
                Op::Truncate { at } => {
                    let o = m.pick(at);
                    l.truncate_to(o).unwrap();
                    if let Some(i) = m.batches.iter().position(|(b, v)| b + v.len() as i64 > o) {
                        let base = m.batches[i].0;
                        if base < m.start {
                            // Cutting the batch that straddles the start: restart at `o`.
                            m.batches.clear();
                            m.start = o;
                            m.leo = o;
                        } else {
                            m.batches.truncate(i);
                            m.leo = base;
                        }
                    }
                }
                Op::AdvanceClock => clock.advance(10_001),
                Op::RetainBytes { bytes } => {
                    config.retention_bytes = i64::from(bytes);
                    l.update_config(config.clone());
                    l.run_retention().unwrap();
                    let start = l.log_start_offset();
                    prop_assert!(start >= m.start && start <= m.leo);
                    prop_assert!(l.size_bytes() <= u64::from(bytes) + 1500);
                    m.start = start;
                    m.batches.retain(|(b, v)| b + v.len() as i64 > start);
                    config.retention_bytes = -1;
                    l.update_config(config.clone());
                }
                Op::DeleteRecords { at } => {
                    let o = m.pick(at);
                    prop_assert_eq!(l.delete_records_before(o).unwrap(), o.max(m.start));
                    m.start = o.max(m.start);
                    m.batches.retain(|(b, v)| b + v.len() as i64 > m.start);
                }
                Op::Reopen { clean } => {
                    let old = log.take().unwrap();
                    if clean {
                        old.close().unwrap();
                    }
                    drop(old);
                    log = Some(open(dir.path(), config.clone(), &clock));
                }
            }
            check(log.as_ref().unwrap(), &m);
        }
    }
}

trait Now {
    fn now(&self) -> i64;
}

impl Now for std::sync::Arc<storage::ManualClock> {
    fn now(&self) -> i64 {
        use storage::Clock;
        self.now_ms()
    }
}
