//! Partitioners compatible with the Java client: murmur2 of the key for keyed records (the
//! same key lands on the same partition as with Java clients), sticky for null keys.

/// Kafka's murmur2 (the Java client's `Utils.murmur2`): 32-bit MurmurHash2 with seed
/// 0x9747b28c, reading 4-byte little-endian blocks.
///
/// ```
/// assert_eq!(client::murmur2(b"21"), -973932308);
/// ```
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = SEED ^ (len as u32);
    let mut blocks = data.chunks_exact(4);
    for b in blocks.by_ref() {
        let mut k = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = blocks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition the Java client's default partitioner picks for `key`.
///
/// ```
/// assert_eq!(client::partition_for_key(b"abc", 10), 479470107 % 10);
/// ```
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    if partitions <= 0 {
        return 0;
    }
    (murmur2(key) & 0x7fff_ffff) % partitions
}

/// How records without an explicit partition are placed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Partitioner {
    /// Java's default: murmur2 of the key; null keys stick to one partition until a batch's
    /// worth of bytes went there, then move to another (KIP-480/KIP-794).
    #[default]
    Default,
    /// Null and non-null keys alike go round-robin over the partitions.
    RoundRobin,
}

/// Per-topic state of the sticky choice for null keys.
#[derive(Debug, Default)]
pub(crate) struct Sticky {
    pub partition: i32,
    pub bytes: usize,
    pub chosen: bool,
    pub round_robin: u32,
}

/// A small xorshift generator; partition choice needs spread, not secrecy.
#[derive(Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub fn seeded() -> Rng {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x2545_f491_4f6c_dd1d);
        Rng(t | 1)
    }

    pub fn next_u32(&mut self) -> u32 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (x >> 32) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_the_java_client() {
        // Expected values are the outputs of the Java client's Utils.murmur2.
        let cases: &[(&[u8], i32)] = &[
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            (b"abc", 479470107),
        ];
        for (data, want) in cases {
            assert_eq!(murmur2(data), *want, "{:?}", std::str::from_utf8(data));
        }
    }

    #[test]
    fn key_partition_is_positive_and_stable() {
        for n in 1..20 {
            let p = partition_for_key(b"21", n);
            assert!((0..n).contains(&p));
            assert_eq!(p, partition_for_key(b"21", n));
        }
        // toPositive(-973932308) = 1173551340.
        assert_eq!(partition_for_key(b"21", 1000), 1173551340 % 1000);
    }
}
