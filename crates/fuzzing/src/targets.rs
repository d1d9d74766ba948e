//! The three target bodies. Each panics (a finding) when the code under test breaks a promise.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use model::TopicConfig;
use protocol::{Decode, RequestHeader, RequestKind};
use record::{
    decode_records, recompute_crc, split_batches, validate_batch, validate_records, BatchBuilder,
    Compression, NewRecord, RecordRules, HEADER_LEN,
};
use storage::{Log, LogOptions, ManualClock};

/// Most bytes of decompressed records the record target lets a batch claim.
const DECOMPRESSED_MAX: usize = 1 << 20;

/// One request frame (without its size prefix), as the connection hands it to the decoder.
/// Decoding returns a request or an error, never a panic, and never allocates for lengths the
/// frame does not hold. That rests on the guard walking exactly what the decoder reads: for a
/// request that decodes, the guard's walk and the decoder end at the same byte.
///
/// (Not checked: that a decoded request re-encodes to the same bytes. `kafka-protocol`
/// re-encodes an unknown tagged field whose tag is at or past 2^31, which it decodes as Kafka
/// does, differently; the broker never re-encodes a request, so that is not a finding.)
pub fn decode_request(frame: &[u8]) {
    let frame = Bytes::copy_from_slice(frame);
    let Ok(req) = protocol::decode_request(frame.clone()) else {
        return;
    };
    let version = req.version();
    let mut buf = frame;
    RequestHeader::decode(&mut buf, req.api_key.request_header_version(version))
        .expect("the header of a decoded request decodes");
    let walked = protocol::guard::walk_request(req.api_key as i16, version, &buf)
        .expect("the guard passed this body");
    let before = buf.len();
    let body = RequestKind::decode(req.api_key, &mut buf, version).expect("the body decodes");
    assert_eq!(
        before - buf.len(),
        walked,
        "{:?} v{version}: the decoder read {} bytes of the body, the guard walked {walked}",
        req.api_key,
        before - buf.len()
    );
    assert_eq!(body, req.body);
}

/// Record batches as a producer sends them. First the raw bytes go through what Produce does
/// with a records field (split into batches, validate each header, then every record).
/// Then the input becomes one batch whose length, magic, record count and CRC are made
/// consistent (what any producer gets right), so the walk reaches the records and the
/// decompressors instead of stopping at the CRC. Whatever validation accepts must decode
/// record by record, as a consumer does, with exactly the records the batch claims.
pub fn record_validation(data: &[u8]) {
    let Some(&flags) = data.first() else { return };
    let rules = RecordRules {
        key_required: flags & 1 == 1,
        decompressed_max_bytes: DECOMPRESSED_MAX,
    };
    if let Ok(batches) = split_batches(&Bytes::copy_from_slice(data)) {
        for batch in batches {
            check_batch(batch, &rules);
        }
    }
    if data.len() < HEADER_LEN {
        return;
    }
    let mut batch = data.to_vec();
    let len = i32::try_from(batch.len() - 12).unwrap_or(i32::MAX);
    batch[8..12].copy_from_slice(&len.to_be_bytes());
    batch[16] = 2; // magic
    let count = i32::from(batch[60] % 8) + 1;
    batch[23..27].copy_from_slice(&(count - 1).to_be_bytes()); // last offset delta
    batch[57..61].copy_from_slice(&count.to_be_bytes());
    batch[21] = 0;
    batch[22] &= 0x17; // a codec id 0-7, maybe transactional; never control
    if recompute_crc(&mut batch).is_ok() {
        check_batch(Bytes::from(batch), &rules);
    }
}

/// Validates one batch; if it passes, a consumer's decode must agree.
fn check_batch(batch: Bytes, rules: &RecordRules) {
    let Ok(h) = validate_batch(&batch, usize::MAX) else {
        return;
    };
    let Ok(summary) = validate_records(&batch, &h, rules) else {
        return;
    };
    let (_, records) =
        decode_records(&batch, rules.decompressed_max_bytes).expect("a validated batch decodes");
    let mut n = 0i64;
    for r in records {
        let r = r.expect("every record of a validated batch decodes");
        assert!(
            !rules.key_required || r.key.is_some(),
            "a validated batch of a compacted topic has keys"
        );
        assert_eq!(r.offset, h.base_offset + n, "record offsets count up");
        n += 1;
    }
    assert_eq!(
        n,
        i64::from(h.records_count),
        "a validated batch has the records it claims ({summary:?})"
    );
}

/// A partition directory made from the input, then opened as the broker does at startup.
///
/// Input layout: byte 0 is a control byte: bits 0-3 the number of 8-byte offset-index
/// entries that follow, bit 4 whether that index file exists, bit 5 a clean-shutdown marker,
/// bit 6 a recovery point (the next byte, so 0-255), bit 7 two segments (the next two bytes
/// say where the rest splits; the second segment is named after the base offset of its first
/// batch). The rest is segment bytes.
///
/// Opening must not panic. A log that opens reads back, from its start to its end, whole
/// batches with increasing offsets (what a consumer fetching from the beginning gets), takes
/// an append at its end offset, and after a clean close opens again with the appended batch
/// in place.
pub fn storage_recovery(data: &[u8]) {
    let Some((&control, mut rest)) = data.split_first() else {
        return;
    };
    let take = |rest: &mut &[u8], n: usize| -> Vec<u8> {
        let (a, b) = rest.split_at(n.min(rest.len()));
        *rest = b;
        a.to_vec()
    };
    let index = take(&mut rest, usize::from(control & 0x0f) * 8);
    let recovery_point = (control & 0x40 != 0).then(|| take(&mut rest, 1).first().copied());
    let split = (control & 0x80 != 0).then(|| {
        let b = take(&mut rest, 2);
        usize::from(u16::from_be_bytes([
            b.first().copied().unwrap_or(0),
            b.get(1).copied().unwrap_or(0),
        ]))
    });
    let Ok(dir) = TempDir::new() else { return };
    let (first, second) = match split {
        Some(at) => rest.split_at(at.min(rest.len())),
        None => (rest, &[][..]),
    };
    let mut ok = std::fs::write(dir.0.join(segment_name(0, "log")), first).is_ok();
    if control & 0x10 != 0 {
        ok &= std::fs::write(dir.0.join(segment_name(0, "index")), &index).is_ok();
    }
    if split.is_some() {
        let base = second
            .get(..8)
            .map(|b| i64::from_be_bytes(b.try_into().unwrap_or_default()))
            .filter(|b| (1..1 << 40).contains(b))
            .unwrap_or(1);
        ok &= std::fs::write(dir.0.join(segment_name(base, "log")), second).is_ok();
    }
    if control & 0x20 != 0 {
        ok &= std::fs::write(dir.0.join(".clean-shutdown"), b"").is_ok();
    }
    if !ok {
        return;
    }
    let options = LogOptions {
        recovery_point: recovery_point.map(|p| i64::from(p.unwrap_or(0))),
        ..Default::default()
    };
    let Ok(log) = open(&dir.0, options) else {
        return;
    };
    let (start, end) = (log.log_start_offset(), log.log_end_offset());
    assert!(0 <= start && start <= end, "log start {start} end {end}");
    // A consumer reading from the start gets whole batches with increasing offsets. An empty
    // read before the end is a gap that runs to the end (an empty last segment whose base
    // offset is past the last batch, as compaction or a roll can leave; Kafka reads the
    // same): the consumer waits there, and the next append must reach it.
    let mut next = start;
    while next < end {
        let r = log
            .read(next, 1 << 16, i64::MAX, true)
            .unwrap_or_else(|e| panic!("read at {next} of a log [{start}, {end}): {e}"));
        if r.data.is_empty() {
            break;
        }
        let batches = split_batches(&r.data).expect("a read returns whole batches");
        assert!(!batches.is_empty());
        assert!(
            r.next_offset > next,
            "read at {next} moved to {}",
            r.next_offset
        );
        next = r.next_offset;
    }
    let mut b = BatchBuilder::new(Compression::None);
    b.push(NewRecord::value("after").timestamp(1_700_000_000_000));
    let batch = b.build().expect("build a one-record batch");
    let info = log.append(batch, 0).expect("a recovered log takes appends");
    assert_eq!(info.base_offset, end, "an append lands at the log end");
    let r = log
        .read(next.min(end), 1 << 16, i64::MAX, true)
        .expect("read where the consumer is");
    assert_eq!(
        r.first_offset, end,
        "a consumer at {next} of a log [{start}, {end}) gets the appended batch"
    );
    log.close().expect("close a recovered log");
    drop(log);
    let log = open(&dir.0, LogOptions::default()).expect("a cleanly closed log opens again");
    assert_eq!(
        log.log_end_offset(),
        end + 1,
        "the appended batch survives a reopen"
    );
    let r = log
        .read(end, 1 << 16, i64::MAX, true)
        .expect("read the appended batch");
    assert_eq!(r.first_offset, end, "the appended batch reads back");
}

fn open(dir: &std::path::Path, options: LogOptions) -> Result<Log, storage::StorageError> {
    let config = TopicConfig {
        index_interval_bytes: 64,
        ..TopicConfig::default()
    };
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    Log::open_with(dir, config, clock, options)
}

fn segment_name(base: i64, ext: &str) -> String {
    format!("{base:020}.{ext}")
}

/// Where the storage target makes its partition directories: $MOLDAU_FUZZ_TMPDIR, else
/// /dev/shm where there is one (a log's open and close fsync several files: on a disk that
/// is most of the time of an input, on tmpfs it costs nothing), else the temp dir.
fn scratch_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("MOLDAU_FUZZ_TMPDIR") {
        return PathBuf::from(dir);
    }
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        return shm.to_path_buf();
    }
    std::env::temp_dir()
}

/// A fresh directory under [`scratch_root`], removed on drop (one type, no dependency: the
/// libFuzzer binaries build this crate too).
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> std::io::Result<TempDir> {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = scratch_root().join(format!(
            "moldau-fuzz-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
