//! Cost of validating every record at produce (`validate_records`), per MiB of records, next
//! to what the broker already paid per batch before (the CRC32C over the batch) and to plain
//! decompression into memory (the ceiling a streaming walk competes with).
//!
//! Run: `cargo bench -p record --bench validate` (criterion; throughput is per uncompressed
//! MiB of records; batches of ~1 MiB of 1 KiB and of 100 B records, every codec).

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use record::{
    decompress, validate_batch, validate_records, BatchBuilder, Compression, NewRecord,
    RecordRules, HEADER_LEN,
};

/// A batch of `n` keyed records of `size` bytes of text drawn at random from 64 words, which
/// compresses about 3-5x like typical JSON-ish payloads.
fn batch(codec: Compression, size: usize, n: usize) -> Vec<u8> {
    let words: Vec<String> = (0..64)
        .map(|i| format!("w{:x}{} ", i * 7919, i % 5))
        .collect();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut b = BatchBuilder::new(codec);
    for i in 0..n {
        let mut value = Vec::with_capacity(size + 16);
        while value.len() < size {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            value.extend_from_slice(words[(rng % 64) as usize].as_bytes());
        }
        value.truncate(size);
        b.push(NewRecord::new(
            Some(Bytes::from(format!("key-{i}"))),
            Some(Bytes::from(value)),
            1_700_000_000_000 + i as i64,
        ));
    }
    match b.build() {
        Ok(b) => b.to_vec(),
        Err(e) => panic!("build batch: {e}"),
    }
}

fn bench(c: &mut Criterion) {
    let rules = RecordRules::default();
    for (label, size, n) in [
        ("1KiB-records", 1024usize, 1000usize),
        ("100B-records", 100, 10_000),
    ] {
        let mut g = c.benchmark_group(format!("validate/{label}"));
        g.sample_size(20);
        for codec in Compression::ALL {
            let b = batch(codec, size, n);
            let h = match validate_batch(&b, usize::MAX) {
                Ok(h) => h,
                Err(e) => panic!("{codec:?}: {e}"),
            };
            let records_bytes = match validate_records(&b, &h, &rules) {
                Ok(s) => s.records_bytes,
                Err(e) => panic!("{codec:?}: {e}"),
            };
            g.throughput(Throughput::Bytes(records_bytes as u64));
            let name = format!("{codec:?}");
            g.bench_with_input(BenchmarkId::new("walk records", &name), &b, |bch, b| {
                bch.iter(|| validate_records(black_box(b), &h, &rules).map(|s| s.records_bytes))
            });
            g.bench_with_input(
                BenchmarkId::new("crc32c of the batch", &name),
                &b,
                |bch, b| bch.iter(|| crc32c::crc32c(black_box(&b[21..]))),
            );
            if codec != Compression::None {
                g.bench_with_input(
                    BenchmarkId::new("decompress to memory", &name),
                    &b,
                    |bch, b| {
                        bch.iter(|| {
                            decompress(codec, black_box(&b[HEADER_LEN..]), 64 << 20)
                                .map(|v| v.len())
                        })
                    },
                );
            }
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
