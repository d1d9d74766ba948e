//! Producer state: per producer id, its epoch, the coordinator epoch of its last transaction
//! marker and its last 5 batches; and the first offset of each open transaction (which bounds
//! the last stable offset). Completing a transaction with an ABORT marker yields the entry the
//! log adds to its aborted-transaction index (`txn_index`).
//!
//! Kept with the log: rebuilt on recovery from the newest snapshot file
//! `<offset>.snapshot` plus the batches after it, so a retried batch can be answered with
//! its original offsets. Only headers are needed, plus the one control record of each
//! transaction marker.

use std::collections::{HashMap, VecDeque};

use record::{BatchHeader, EndTxnMarker};

use crate::error::AppendError;
use crate::txn_index::AbortedTxn;

/// Kafka keeps this many batches per producer for duplicate detection.
pub const RETAINED_BATCHES: usize = 5;
/// The producer-state snapshot format written now.
const SNAPSHOT_VERSION: u16 = 2;

/// One appended batch of a producer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BatchMeta {
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ProducerEntry {
    pub epoch: i16,
    pub batches: VecDeque<BatchMeta>,
    /// Largest batch max timestamp seen (Kafka's `lastTimestamp`), for expiry.
    pub last_timestamp: i64,
    /// Coordinator epoch of the last transaction marker (-1 before any): a marker from an
    /// older coordinator is fenced.
    pub coordinator_epoch: i32,
}

impl Default for ProducerEntry {
    fn default() -> Self {
        ProducerEntry {
            epoch: 0,
            batches: VecDeque::new(),
            last_timestamp: 0,
            coordinator_epoch: -1,
        }
    }
}

impl ProducerEntry {
    pub fn last_seq(&self) -> i32 {
        self.batches.back().map(|b| b.last_seq).unwrap_or(-1)
    }
}

/// What the producer checks decided for one batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// Not idempotent, or in sequence: write it.
    Append,
    /// A retry of a batch already in the log.
    Duplicate(BatchMeta),
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ProducerStateMap {
    pub producers: HashMap<i64, ProducerEntry>,
    /// Open transactions: producer id -> first offset.
    pub ongoing: HashMap<i64, i64>,
}

/// A producer as DescribeProducers shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerSnapshot {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// -1 when the producer has no retained batch.
    pub last_sequence: i32,
    pub last_timestamp: i64,
    pub coordinator_epoch: i32,
    /// First offset of its open transaction, -1 when none.
    pub current_txn_start_offset: i64,
}

fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX {
        0
    } else {
        seq + 1
    }
}

impl ProducerStateMap {
    /// Kafka's rules: an older epoch is fenced; a new epoch must start at sequence 0 (unless
    /// the producer is unknown, e.g. its state expired with retention); within an epoch a
    /// batch equal to one of the last 5 is a duplicate, otherwise it must follow the last
    /// sequence exactly. A transaction marker (`marker`, for control batches) is fenced by an
    /// older producer epoch or an older coordinator epoch. A producer with an open transaction
    /// may only write transactional batches until the marker. Batches without a sequence
    /// (written by a coordinator, e.g. transactional offset commits) are only fenced.
    pub fn check(
        &self,
        h: &BatchHeader,
        marker: Option<EndTxnMarker>,
    ) -> Result<Check, AppendError> {
        if h.producer_id < 0 {
            return Ok(Check::Append);
        }
        let Some(entry) = self.producers.get(&h.producer_id) else {
            return Ok(Check::Append);
        };
        if h.producer_epoch < entry.epoch {
            return Err(AppendError::InvalidProducerEpoch {
                producer_id: h.producer_id,
                epoch: h.producer_epoch,
                current: entry.epoch,
            });
        }
        if h.is_control() {
            if let Some(m) = marker {
                if m.coordinator_epoch < entry.coordinator_epoch {
                    return Err(AppendError::CoordinatorFenced {
                        producer_id: h.producer_id,
                        coordinator_epoch: m.coordinator_epoch,
                        current: entry.coordinator_epoch,
                    });
                }
            }
            return Ok(Check::Append);
        }
        if !h.is_transactional() && self.ongoing.contains_key(&h.producer_id) {
            return Err(AppendError::InvalidTxnState {
                producer_id: h.producer_id,
            });
        }
        if h.base_sequence < 0 {
            return Ok(Check::Append);
        }
        if h.producer_epoch > entry.epoch {
            if h.base_sequence != 0 {
                return Err(AppendError::OutOfOrderSequence {
                    producer_id: h.producer_id,
                    expected: 0,
                    got: h.base_sequence,
                });
            }
            return Ok(Check::Append);
        }
        let last_seq = h.last_sequence();
        if let Some(b) = entry
            .batches
            .iter()
            .find(|b| b.first_seq == h.base_sequence && b.last_seq == last_seq)
        {
            return Ok(Check::Duplicate(*b));
        }
        if entry.batches.is_empty() {
            return Ok(Check::Append);
        }
        let expected = next_seq(entry.last_seq());
        if h.base_sequence != expected {
            return Err(AppendError::OutOfOrderSequence {
                producer_id: h.producer_id,
                expected,
                got: h.base_sequence,
            });
        }
        Ok(Check::Append)
    }

    /// Records an appended batch (with its final offsets).
    pub fn update(&mut self, h: &BatchHeader) {
        if h.producer_id < 0 {
            return;
        }
        if h.is_transactional() && !h.is_control() {
            self.ongoing.entry(h.producer_id).or_insert(h.base_offset);
        }
        let entry = self.producers.entry(h.producer_id).or_default();
        entry.last_timestamp = entry.last_timestamp.max(h.max_timestamp);
        if h.producer_epoch != entry.epoch {
            entry.batches.clear();
            entry.epoch = h.producer_epoch;
        }
        // Control batches (transaction markers) carry no sequence; they only bump the epoch.
        if h.is_control() || h.base_sequence < 0 {
            return;
        }
        if entry.batches.len() == RETAINED_BATCHES {
            entry.batches.pop_front();
        }
        entry.batches.push_back(BatchMeta {
            first_seq: h.base_sequence,
            last_seq: h.last_sequence(),
            base_offset: h.base_offset,
            last_offset: h.last_offset(),
            max_timestamp: h.max_timestamp,
        });
    }

    /// Applies a transaction marker (a control batch) at `h.base_offset`: closes the
    /// producer's open transaction, records the coordinator epoch, and for an ABORT returns
    /// the aborted-transaction entry (None when no transaction was open here, or on commit).
    pub fn complete_txn(&mut self, h: &BatchHeader, marker: EndTxnMarker) -> Option<AbortedTxn> {
        if let Some(e) = self.producers.get_mut(&h.producer_id) {
            e.coordinator_epoch = e.coordinator_epoch.max(marker.coordinator_epoch);
        }
        let first_offset = self.ongoing.remove(&h.producer_id)?;
        if marker.commit {
            return None;
        }
        Some(AbortedTxn {
            producer_id: h.producer_id,
            first_offset,
            last_offset: h.base_offset,
            last_stable_offset: self.first_unstable_offset().unwrap_or(h.base_offset + 1),
        })
    }

    /// The first offset of the oldest open transaction.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing.values().min().copied()
    }

    /// Whether the producer has an open transaction on this partition.
    pub fn has_ongoing(&self, producer_id: i64) -> bool {
        self.ongoing.contains_key(&producer_id)
    }

    /// Every known producer, ordered by id.
    pub fn snapshots(&self) -> Vec<ProducerSnapshot> {
        let mut out: Vec<ProducerSnapshot> = self
            .producers
            .iter()
            .map(|(&id, e)| ProducerSnapshot {
                producer_id: id,
                producer_epoch: e.epoch,
                last_sequence: e.last_seq(),
                last_timestamp: e.last_timestamp,
                coordinator_epoch: e.coordinator_epoch,
                current_txn_start_offset: self.ongoing.get(&id).copied().unwrap_or(-1),
            })
            .collect();
        out.sort_unstable_by_key(|p| p.producer_id);
        out
    }

    pub fn get(&self, producer_id: i64) -> Option<(i16, i32)> {
        self.producers
            .get(&producer_id)
            .map(|e| (e.epoch, e.last_seq()))
    }

    /// Forgets producers idle for `expiration_ms` (Kafka's `producer.id.expiration.ms`,
    /// measured, as there, from the producer's newest batch timestamp); returns how many.
    pub fn remove_expired(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        let ongoing = &self.ongoing;
        // A producer with an open transaction is never expired (as in Kafka): its state is
        // what the transaction marker will close.
        self.producers.retain(|id, e| {
            ongoing.contains_key(id) || now_ms.saturating_sub(e.last_timestamp) < expiration_ms
        });
        before - self.producers.len()
    }

    /// Whether a batch ending at `last_offset` is the newest batch of `producer_id`
    /// (compaction keeps such batches, emptied, so producer state survives).
    pub fn is_last_batch(&self, producer_id: i64, last_offset: i64) -> bool {
        self.producers
            .get(&producer_id)
            .and_then(|e| e.batches.back())
            .is_some_and(|b| b.last_offset == last_offset)
    }

    /// Snapshot file body (version 2): version, producer count, producers (id, epoch, last
    /// timestamp, coordinator epoch, batches), open transactions, CRC32C trailer. Aborted
    /// transactions live in the `.txnindex` files, not here.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + self.producers.len() * 64);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        let mut ids: Vec<_> = self.producers.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let e = &self.producers[&id];
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&e.epoch.to_be_bytes());
            out.extend_from_slice(&e.last_timestamp.to_be_bytes());
            out.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
            out.push(e.batches.len() as u8);
            for b in &e.batches {
                out.extend_from_slice(&b.first_seq.to_be_bytes());
                out.extend_from_slice(&b.last_seq.to_be_bytes());
                out.extend_from_slice(&b.base_offset.to_be_bytes());
                out.extend_from_slice(&b.last_offset.to_be_bytes());
                out.extend_from_slice(&b.max_timestamp.to_be_bytes());
            }
        }
        let mut ongoing: Vec<_> = self.ongoing.iter().collect();
        ongoing.sort_unstable();
        out.extend_from_slice(&(ongoing.len() as u32).to_be_bytes());
        for (pid, first) in ongoing {
            out.extend_from_slice(&pid.to_be_bytes());
            out.extend_from_slice(&first.to_be_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// Decodes a snapshot (version 1 or 2); None on any inconsistency (the caller then
    /// replays the log). Version 1 snapshots also listed aborted transactions; they are
    /// returned beside the map so the log can index them.
    pub fn decode(bytes: &[u8]) -> Option<(ProducerStateMap, Vec<AbortedTxn>)> {
        if bytes.len() < 10 {
            return None;
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32c::crc32c(body) != u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]) {
            return None;
        }
        let mut r = Reader { b: body, pos: 0 };
        let version = r.u16()?;
        if version != 1 && version != SNAPSHOT_VERSION {
            return None;
        }
        let count = r.u32()? as usize;
        // 19 bytes minimum per producer: never trust the count for allocation.
        if count > body.len() / 19 {
            return None;
        }
        let mut map = ProducerStateMap::default();
        for _ in 0..count {
            let id = r.i64()?;
            let epoch = r.u16()? as i16;
            let last_timestamp = r.i64()?;
            let coordinator_epoch = if version >= 2 { r.u32()? as i32 } else { -1 };
            let n = r.u8()? as usize;
            if n > RETAINED_BATCHES {
                return None;
            }
            let mut batches = VecDeque::with_capacity(n);
            for _ in 0..n {
                batches.push_back(BatchMeta {
                    first_seq: r.u32()? as i32,
                    last_seq: r.u32()? as i32,
                    base_offset: r.i64()?,
                    last_offset: r.i64()?,
                    max_timestamp: r.i64()?,
                });
            }
            map.producers.insert(
                id,
                ProducerEntry {
                    epoch,
                    batches,
                    last_timestamp,
                    coordinator_epoch,
                },
            );
        }
        let n = r.u32()? as usize;
        if n > body.len() / 16 {
            return None;
        }
        for _ in 0..n {
            let pid = r.i64()?;
            let first = r.i64()?;
            map.ongoing.insert(pid, first);
        }
        let mut legacy_aborted = Vec::new();
        if version == 1 {
            let n = r.u32()? as usize;
            if n > body.len() / 24 {
                return None;
            }
            legacy_aborted.reserve(n);
            for _ in 0..n {
                let producer_id = r.i64()?;
                let first_offset = r.i64()?;
                let last_offset = r.i64()?;
                legacy_aborted.push(AbortedTxn {
                    producer_id,
                    first_offset,
                    last_offset,
                    last_stable_offset: last_offset + 1,
                });
            }
        }
        (r.pos == body.len()).then_some((map, legacy_aborted))
    }
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|s| s[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|s| u16::from_be_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn i64(&mut self) -> Option<i64> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Some(i64::from_be_bytes(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use record::{BatchBuilder, Compression, NewRecord};

    fn header(pid: i64, epoch: i16, seq: i32, n: usize, base: i64) -> BatchHeader {
        let mut b = BatchBuilder::new(Compression::None)
            .base_offset(base)
            .producer(pid, epoch, seq);
        for _ in 0..n {
            b.push(NewRecord::value("x"));
        }
        BatchHeader::parse(&b.build().unwrap()).unwrap()
    }

    #[test]
    fn sequence_rules() {
        let mut m = ProducerStateMap::default();
        let h = header(7, 0, 0, 3, 0);
        assert_eq!(m.check(&h, None).unwrap(), Check::Append);
        m.update(&h);
        assert!(matches!(m.check(&h, None).unwrap(), Check::Duplicate(b) if b.base_offset == 0));
        let gap = header(7, 0, 5, 1, 3);
        assert!(matches!(
            m.check(&gap, None),
            Err(AppendError::OutOfOrderSequence { expected: 3, .. })
        ));
        let next = header(7, 0, 3, 1, 3);
        assert_eq!(m.check(&next, None).unwrap(), Check::Append);
        m.update(&next);
        let old_epoch = header(7, -1, 4, 1, 4);
        assert!(matches!(
            m.check(&old_epoch, None),
            Err(AppendError::InvalidProducerEpoch { .. })
        ));
        let new_epoch_bad = header(7, 1, 4, 1, 4);
        assert!(m.check(&new_epoch_bad, None).is_err());
        let new_epoch = header(7, 1, 0, 1, 4);
        assert_eq!(m.check(&new_epoch, None).unwrap(), Check::Append);
        m.update(&new_epoch);
        assert_eq!(m.get(7), Some((1, 0)));
        // Unknown producers are accepted at any sequence, as Kafka does after state expiry.
        assert_eq!(
            m.check(&header(8, 0, 42, 1, 5), None).unwrap(),
            Check::Append
        );
    }

    #[test]
    fn control_batches_only_check_the_epoch() {
        let mut m = ProducerStateMap::default();
        m.update(&header(3, 2, 0, 2, 0));
        let marker = |epoch: i16| {
            let b = BatchBuilder::new(Compression::None)
                .base_offset(2)
                .producer(3, epoch, -1)
                .control(true)
                .transactional(true);
            let mut b = b;
            b.push(NewRecord::new(
                Some(bytes::Bytes::from_static(&[0, 0, 0, 0])),
                None,
                0,
            ));
            BatchHeader::parse(&b.build().unwrap()).unwrap()
        };
        let mk = |commit, coordinator_epoch| EndTxnMarker {
            commit,
            coordinator_epoch,
        };
        assert!(m.check(&marker(1), Some(mk(true, 0))).is_err());
        assert_eq!(
            m.check(&marker(2), Some(mk(true, 0))).unwrap(),
            Check::Append
        );
        m.update(&marker(3));
        assert_eq!(m.complete_txn(&marker(3), mk(false, 5)), None);
        assert_eq!(m.get(3), Some((3, -1)));
        // A marker from an older coordinator is fenced.
        assert!(matches!(
            m.check(&marker(3), Some(mk(true, 4))),
            Err(AppendError::CoordinatorFenced { current: 5, .. })
        ));
        assert_eq!(
            m.check(&marker(3), Some(mk(true, 5))).unwrap(),
            Check::Append
        );
    }

    #[test]
    fn transactions_open_and_close_by_marker() {
        let mut m = ProducerStateMap::default();
        let mut b = BatchBuilder::new(Compression::None)
            .base_offset(4)
            .producer(9, 0, 0)
            .transactional(true);
        b.push(NewRecord::value("t"));
        let h = BatchHeader::parse(&b.build().unwrap()).unwrap();
        m.update(&h);
        assert!(m.has_ongoing(9));
        assert_eq!(m.first_unstable_offset(), Some(4));
        // No plain writes while the transaction is open.
        assert!(matches!(
            m.check(&header(9, 0, 1, 1, 5), None),
            Err(AppendError::InvalidTxnState { .. })
        ));
        let mut mk = BatchBuilder::new(Compression::None)
            .base_offset(7)
            .producer(9, 0, -1)
            .transactional(true)
            .control(true);
        mk.push(NewRecord::value("m"));
        let mh = BatchHeader::parse(&mk.build().unwrap()).unwrap();
        let a = m.complete_txn(
            &mh,
            EndTxnMarker {
                commit: false,
                coordinator_epoch: 0,
            },
        );
        assert_eq!(
            a,
            Some(AbortedTxn {
                producer_id: 9,
                first_offset: 4,
                last_offset: 7,
                last_stable_offset: 8
            })
        );
        assert!(!m.has_ongoing(9));
        assert_eq!(m.snapshots()[0].current_txn_start_offset, -1);
    }

    #[test]
    fn idle_producers_expire() {
        let mut m = ProducerStateMap::default();
        m.update(&header(1, 0, 0, 1, 0)); // timestamp 0
        let mut b = BatchBuilder::new(Compression::None).producer(2, 0, 0);
        b.push(NewRecord::value("x").timestamp(5000));
        m.update(&BatchHeader::parse(&b.build().unwrap()).unwrap());
        assert_eq!(m.remove_expired(4000, 3000), 1);
        assert_eq!(m.get(1), None);
        assert!(m.get(2).is_some());
    }

    #[test]
    fn only_five_batches_are_kept() {
        let mut m = ProducerStateMap::default();
        for i in 0..7 {
            m.update(&header(1, 0, i, 1, i64::from(i)));
        }
        assert_eq!(m.producers[&1].batches.len(), RETAINED_BATCHES);
        assert!(m.check(&header(1, 0, 0, 1, 0), None).is_err());
        assert!(matches!(
            m.check(&header(1, 0, 2, 1, 0), None).unwrap(),
            Check::Duplicate(_)
        ));
    }

    #[test]
    fn snapshot_round_trip_and_garbage() {
        let mut m = ProducerStateMap::default();
        for i in 0..3 {
            m.update(&header(i, 2, 0, 2, i * 10));
        }
        m.ongoing.insert(1, 10);
        m.producers.get_mut(&2).unwrap().coordinator_epoch = 4;
        let enc = m.encode();
        assert_eq!(ProducerStateMap::decode(&enc), Some((m, Vec::new())));
        for cut in 0..enc.len() {
            assert!(ProducerStateMap::decode(&enc[..cut]).is_none());
        }
        let mut flipped = enc.clone();
        flipped[5] ^= 0x10;
        assert!(ProducerStateMap::decode(&flipped).is_none());
    }
}
