//! Recovery from torn tails, bit flips, damaged indexes and stray files: the longest valid
//! prefix survives, nothing panics.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::path::Path;

use common::*;
use model::TopicConfig;
use record::Compression;

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn last_log_file(dir: &Path) -> std::path::PathBuf {
    let mut logs: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs.pop().unwrap()
}

/// Writes 30 batches (mixed codecs, several segments) and drops the log without closing.
fn write_log(dir: &Path) -> (i64, u64) {
    let clock = clock();
    let log = open(dir, config(), &clock);
    for i in 0..30 {
        let codec = Compression::ALL[i % 5];
        log.append(batch_with(codec, "v", 1 + i % 4, T0 + i as i64), 0)
            .unwrap();
    }
    let last_base = log
        .read(log.log_end_offset() - 1, 1 << 20, i64::MAX, true)
        .unwrap()
        .first_offset;
    let last_len = fs::metadata(last_log_file(dir)).unwrap().len();
    let r = log.read(last_base, 1 << 20, i64::MAX, true).unwrap();
    (last_base, last_len - r.data.len() as u64)
}

#[test]
fn a_tail_cut_at_every_byte_is_truncated_to_the_last_whole_batch() {
    let src = tempfile::tempdir().unwrap();
    let (last_base, last_pos) = write_log(src.path());
    let file_len = fs::metadata(last_log_file(src.path())).unwrap().len();
    let clock = clock();
    for cut in last_pos..file_len {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(src.path(), dir.path());
        let f = fs::OpenOptions::new()
            .write(true)
            .open(last_log_file(dir.path()))
            .unwrap();
        f.set_len(cut).unwrap();
        drop(f);
        let log = open(dir.path(), config(), &clock);
        assert_eq!(log.log_end_offset(), last_base, "cut at {cut}");
        assert_eq!(read_all(&log, 0).len() as i64, last_base);
        assert_eq!(
            log.append(batch("n", 1, T0), 0).unwrap().base_offset,
            last_base
        );
    }
}

#[test]
fn bit_flips_in_the_tail_batch_are_truncated() {
    let src = tempfile::tempdir().unwrap();
    let (last_base, last_pos) = write_log(src.path());
    let file_len = fs::metadata(last_log_file(src.path())).unwrap().len();
    let clock = clock();
    // The base offset and leader epoch (bytes 0..8 and 12..16) are not covered by the CRC,
    // in Kafka's format too; every other byte is.
    let covered = (last_pos + 8..last_pos + 12).chain(last_pos + 16..file_len);
    for (n, at) in covered.enumerate() {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(src.path(), dir.path());
        let path = last_log_file(dir.path());
        let mut bytes = fs::read(&path).unwrap();
        bytes[at as usize] ^= 1 << (n % 8);
        fs::write(&path, &bytes).unwrap();
        let log = open(dir.path(), config(), &clock);
        assert_eq!(log.log_end_offset(), last_base, "flip at {at}");
    }
}

#[test]
fn damaged_or_missing_indexes_are_rebuilt() {
    let clock = clock();
    for clean in [false, true] {
        for damage in 0..3 {
            let dir = tempfile::tempdir().unwrap();
            let leo = {
                let log = open(dir.path(), config(), &clock);
                for i in 0..200 {
                    log.append(batch("i", 2, T0 + i), 0).unwrap();
                }
                if clean {
                    log.close().unwrap();
                }
                log.log_end_offset()
            };
            for e in fs::read_dir(dir.path()).unwrap() {
                let p = e.unwrap().path();
                let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
                if ext == "index" || ext == "timeindex" || ext == "snapshot" {
                    match damage {
                        0 => fs::remove_file(&p).unwrap(),
                        1 => fs::write(&p, b"garbage!garbage!garbage").unwrap(),
                        _ => {
                            let b = fs::read(&p).unwrap();
                            let mut b = b.clone();
                            for x in b.iter_mut().step_by(3) {
                                *x = x.wrapping_add(77);
                            }
                            fs::write(&p, &b).unwrap();
                        }
                    }
                }
            }
            let log = open(dir.path(), config(), &clock);
            assert_eq!(log.log_end_offset(), leo);
            let all = read_all(&log, 0);
            assert_eq!(all.len() as i64, leo);
            assert!(all.iter().enumerate().all(|(i, (o, _))| *o == i as i64));
            for probe in [0, 7, 150, 399] {
                let r = log.read(probe, 100, i64::MAX, true).unwrap();
                assert!(r.first_offset <= probe && r.next_offset > probe);
            }
            assert_eq!(log.offset_for_timestamp(T0 + 150), Some((300, T0 + 150)));
        }
    }
}

#[test]
fn stray_and_garbage_files_never_panic() {
    let clock = clock();
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("00000000000000000000.log"),
        vec![0xAB; 5000],
    )
    .unwrap();
    fs::write(dir.path().join("00000000000000000000.index"), vec![1; 77]).unwrap();
    fs::write(
        dir.path().join("00000000000000000042.snapshot"),
        vec![9; 30],
    )
    .unwrap();
    fs::write(dir.path().join("00000000000000000000.log.cleaned"), b"x").unwrap();
    fs::write(dir.path().join("log-start-offset"), b"not a number").unwrap();
    fs::write(dir.path().join("notes.txt"), b"hello").unwrap();
    let log = open(dir.path(), config(), &clock);
    assert_eq!(log.log_end_offset(), 0);
    assert!(!dir.path().join("00000000000000000000.log.cleaned").exists());
    log.append(batch("ok", 1, T0), 0).unwrap();
    drop(log);

    // A random middle segment after a clean shutdown is checked against its index.
    let dir = tempfile::tempdir().unwrap();
    {
        let log = open(dir.path(), config(), &clock);
        for _ in 0..200 {
            log.append(batch("m", 2, T0), 0).unwrap();
        }
        log.close().unwrap();
    }
    let first = dir.path().join("00000000000000000000.log");
    let len = fs::metadata(&first).unwrap().len() as usize;
    fs::write(&first, vec![0x55; len]).unwrap();
    let log = open(dir.path(), TopicConfig::default(), &clock);
    assert!(log.log_end_offset() < 400);
    assert_eq!(
        read_all(&log, log.log_start_offset()).len() as i64,
        log.log_end_offset() - log.log_start_offset()
    );
}
