//! The on-disk metadata log against a model (random appends with truncation, hard states and
//! snapshots, reopened at random points), and issue 8's rules on it: a torn tail is cut, any
//! other damage refuses to open with the file, the offset and a way out; nothing is deleted.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

use bytes::Bytes;
use proptest::prelude::*;
use quorum::disk::{Disk, DiskError, MemState};
use quorum::FileDisk;
use raft::eraftpb::{Entry, HardState, Snapshot};
use std::path::Path;

fn entry(index: u64, term: u64, len: usize) -> Entry {
    let mut e = Entry::default();
    e.index = index;
    e.term = term;
    e.data = Bytes::from(vec![(index % 251) as u8; len]);
    e
}

fn snapshot(index: u64, term: u64, data: &[u8]) -> Snapshot {
    let mut s = Snapshot::default();
    s.data = Bytes::copy_from_slice(data);
    s.mut_metadata().index = index;
    s.mut_metadata().term = term;
    s.mut_metadata().mut_conf_state().voters = vec![1, 2, 3];
    s
}

fn open(dir: &Path) -> (FileDisk, quorum::disk::Persisted) {
    let mut d = FileDisk::new(dir).with_segment_bytes(2048);
    let p = d.load().unwrap();
    (d, p)
}

#[derive(Debug, Clone)]
enum Op {
    /// Append `n` entries starting `back` entries before the end (0 = at the end).
    Append {
        back: u64,
        n: u64,
        len: usize,
    },
    HardState {
        term: u64,
        vote: u64,
    },
    /// Snapshot at `back` entries before the last one.
    Snapshot {
        back: u64,
    },
    Sync,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u64..4, 1u64..6, 0usize..300).prop_map(|(back, n, len)| Op::Append { back, n, len }),
        1 => (1u64..5, 0u64..4).prop_map(|(term, vote)| Op::HardState { term, vote }),
        1 => (0u64..5).prop_map(|back| Op::Snapshot { back }),
        2 => Just(Op::Sync),
        1 => Just(Op::Reopen),
    ]
}

fn last_index(m: &MemState) -> u64 {
    m.entries
        .last()
        .map(|e| e.index)
        .or_else(|| m.snapshot.as_ref().map(|s| s.get_metadata().index))
        .unwrap_or(0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn file_disk_matches_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let (mut disk, _) = open(dir.path());
        let mut model = MemState::default();
        let mut term = 1;
        for op in ops {
            match op {
                Op::Append { back, n, len } => {
                    let last = last_index(&model);
                    let floor = model.snapshot.as_ref().map_or(0, |s| s.get_metadata().index);
                    let first = (last + 1).saturating_sub(back).max(floor + 1);
                    if back > 0 { term += 1; }
                    let es: Vec<Entry> = (first..first + n).map(|i| entry(i, term, len)).collect();
                    disk.append(&es).unwrap();
                    model.entries.retain(|e| e.index < first);
                    model.entries.extend(es);
                }
                Op::HardState { term: t, vote } => {
                    let hs = HardState { term: t, vote, commit: 0, ..Default::default() };
                    disk.save_hard_state(&hs).unwrap();
                    model.hard_state = hs;
                }
                Op::Snapshot { back } => {
                    let last = last_index(&model);
                    let floor = model.snapshot.as_ref().map_or(0, |s| s.get_metadata().index);
                    let at = last.saturating_sub(back);
                    if at > floor {
                        let t = model.entries.iter().find(|e| e.index == at).map_or(term, |e| e.term);
                        let s = snapshot(at, t, &at.to_be_bytes());
                        disk.save_snapshot(&s).unwrap();
                        model.entries.retain(|e| e.index > at);
                        model.snapshot = Some(s);
                    }
                }
                Op::Sync => disk.sync().unwrap(),
                Op::Reopen => {
                    // Without a power loss, written bytes survive a process crash.
                    let (d, p) = open(dir.path());
                    disk = d;
                    prop_assert_eq!(&p.entries, &model.entries);
                    prop_assert_eq!(p.hard_state.term, model.hard_state.term);
                    prop_assert_eq!(p.hard_state.vote, model.hard_state.vote);
                    prop_assert_eq!(p.snapshot.map(|s| s.get_metadata().index), model.snapshot.as_ref().map(|s| s.get_metadata().index));
                }
            }
        }
        let (_, p) = open(dir.path());
        prop_assert_eq!(&p.entries, &model.entries);
    }
}

fn segments(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    v.sort();
    v
}

fn write_log(dir: &Path, n: u64) {
    let (mut disk, _) = open(dir);
    for i in 1..=n {
        disk.append(&[entry(i, 1, 100)]).unwrap();
    }
    disk.sync().unwrap();
}

#[test]
fn a_torn_tail_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 5);
    let seg = segments(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let full = bytes.len();
    let head = bytes[..60].to_vec();
    bytes.extend_from_slice(&head);
    bytes.extend_from_slice(&[0; 100]);
    std::fs::write(&seg, &bytes).unwrap();
    let (_, p) = open(dir.path());
    assert_eq!(p.entries.len(), 5);
    assert_eq!(std::fs::metadata(&seg).unwrap().len() as usize, full);
}

#[test]
fn damage_followed_by_valid_entries_refuses_to_open_and_cuts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 5);
    let seg = segments(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let frame = bytes.len() / 5;
    bytes[frame + 40] ^= 0xff;
    std::fs::write(&seg, &bytes).unwrap();
    let mut d = FileDisk::new(dir.path());
    let err = d.load().unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, DiskError::Corrupt { offset, .. } if offset == frame as u64),
        "{msg}"
    );
    assert!(
        msg.contains(&seg.display().to_string()) && msg.contains("To recover"),
        "{msg}"
    );
    assert_eq!(std::fs::read(&seg).unwrap(), bytes);
}

#[test]
fn damage_in_an_older_segment_is_never_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 60);
    let segs = segments(dir.path());
    assert!(segs.len() > 2, "{segs:?}");
    // The very end of the first segment: nothing valid follows in that file, but later
    // segments hold committed entries.
    let first = &segs[0];
    let mut bytes = std::fs::read(first).unwrap();
    let n = bytes.len();
    bytes[n - 3] ^= 0xff;
    std::fs::write(first, &bytes).unwrap();
    let err = FileDisk::new(dir.path()).load().unwrap_err();
    assert!(matches!(err, DiskError::Corrupt { .. }), "{err}");
    assert_eq!(segments(dir.path()).len(), segs.len());
}

#[test]
fn a_damaged_snapshot_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 5);
    let (mut d, _) = open(dir.path());
    d.save_snapshot(&snapshot(3, 1, b"image")).unwrap();
    let snap = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "checkpoint"))
        .unwrap();
    let mut bytes = std::fs::read(&snap).unwrap();
    let n = bytes.len();
    bytes[n - 1] ^= 1;
    std::fs::write(&snap, &bytes).unwrap();
    let err = FileDisk::new(dir.path()).load().unwrap_err();
    assert!(err.to_string().contains("checkpoint"), "{err}");
}

#[test]
fn a_torn_hard_state_slot_falls_back_to_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let (mut d, _) = open(dir.path());
    d.save_hard_state(&HardState {
        term: 3,
        vote: 2,
        commit: 1,
        ..Default::default()
    })
    .unwrap();
    d.save_hard_state(&HardState {
        term: 4,
        vote: 1,
        commit: 1,
        ..Default::default()
    })
    .unwrap();
    d.sync().unwrap();
    let path = dir.path().join("raft-state");
    let mut bytes = std::fs::read(&path).unwrap();
    // The second write went to slot 0 (seq 2): tear it.
    bytes[10] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let (_, p) = open(dir.path());
    assert_eq!((p.hard_state.term, p.hard_state.vote), (3, 2));
}

#[test]
fn a_directory_that_disappears_fails_the_next_write_instead_of_starting_over() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("meta");
    let (mut d, _) = open(&dir);
    d.append(&[entry(1, 1, 10)]).unwrap();
    let mut hs = HardState::default();
    hs.term = 1;
    hs.vote = 1;
    d.save_hard_state(&hs).unwrap();
    d.sync().unwrap();
    std::fs::rename(&dir, tmp.path().join("moved")).unwrap();
    // Made empty again, the node would restart without the term and vote it acknowledged.
    assert!(d.save_snapshot(&snapshot(1, 1, b"image")).is_err());
    assert!(d.save_voters(&[1, 2, 3]).is_err());
    assert!(!dir.exists());
    // A directory that never existed is made on the first write.
    let fresh = tmp.path().join("fresh");
    let (mut d, p) = open(&fresh);
    assert!(p.entries.is_empty());
    d.append(&[entry(1, 1, 10)]).unwrap();
    d.sync().unwrap();
    assert!(fresh.exists());
}
