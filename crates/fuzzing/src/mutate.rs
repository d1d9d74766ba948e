//! A small deterministic mutator for the stable driver: the kinds of change libFuzzer makes
//! (bit flips, interesting integers, inserted, deleted, duplicated and spliced ranges), plus
//! Kafka varints, so that a seed frame or batch turns into the near-misses that break parsers:
//! lengths and counts off by one, negative, or huge.

/// splitmix64: tiny, fast, and the same sequence on every machine.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Integers that sit on the edges parsers get wrong.
const INTERESTING: &[i64] = &[
    0,
    1,
    -1,
    2,
    -2,
    -5,
    7,
    8,
    16,
    61,
    127,
    128,
    255,
    256,
    0x7fff,
    0x8000,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    -0x8000_0000,
    0xffff_ffff,
    0x7fff_fff0,
    1 << 20,
    1 << 30,
    i64::MAX,
    i64::MIN,
];

/// One to four stacked mutations of `input` (another corpus entry may be spliced in), never
/// longer than `max_len`.
pub fn mutate(rng: &mut Rng, input: &[u8], corpus: &[Vec<u8>], max_len: usize) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        mutate_once(rng, &mut out, corpus);
    }
    out.truncate(max_len);
    out
}

fn interesting(rng: &mut Rng, len: usize) -> i64 {
    // Sometimes a length that matches the input, or is just past it.
    match rng.below(8) {
        0 => len as i64 + rng.below(3) as i64 - 1,
        1 => rng.below(64) as i64,
        _ => INTERESTING[rng.below(INTERESTING.len())],
    }
}

fn mutate_once(rng: &mut Rng, out: &mut Vec<u8>, corpus: &[Vec<u8>]) {
    if out.is_empty() {
        out.extend((0..1 + rng.below(16)).map(|_| rng.next_u64() as u8));
        return;
    }
    let len = out.len();
    let at = rng.below(len);
    match rng.below(11) {
        0 => out[at] ^= 1 << rng.below(8),
        1 => out[at] = rng.next_u64() as u8,
        2 => out[at] = [0u8, 1, 0x7f, 0x80, 0xff][rng.below(5)],
        3 | 4 => {
            // A big-endian integer of 2, 4 or 8 bytes: Kafka's lengths, counts and offsets.
            let width = [2usize, 4, 8][rng.below(3)];
            let v = interesting(rng, len).to_be_bytes();
            for (i, b) in v[8 - width..].iter().enumerate() {
                if let Some(slot) = out.get_mut(at + i) {
                    *slot = *b;
                }
            }
        }
        5 => {
            // A zigzag varint: the lengths and counts inside records and compact fields.
            let v = interesting(rng, len);
            let mut z = ((v << 1) ^ (v >> 63)) as u64;
            let mut bytes = Vec::new();
            loop {
                let b = (z & 0x7f) as u8;
                z >>= 7;
                if z == 0 {
                    bytes.push(b);
                    break;
                }
                bytes.push(b | 0x80);
            }
            let end = (at + rng.below(3)).min(len);
            out.splice(at..end, bytes);
        }
        6 => {
            let n = 1 + rng.below(16);
            let fill: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            out.splice(at..at, fill);
        }
        7 => {
            let n = 1 + rng.below((len - at).min(64));
            out.drain(at..at + n);
        }
        8 => {
            // Copy a range elsewhere (a repeated field, record or batch).
            let n = 1 + rng.below((len - at).min(256));
            let chunk = out[at..at + n].to_vec();
            let to = rng.below(len + 1);
            out.splice(to..to, chunk);
        }
        9 => out.truncate(at),
        _ => {
            // Splice: this input's head, another entry's tail.
            if let Some(other) = corpus.get(rng.below(corpus.len().max(1))) {
                if !other.is_empty() {
                    let from = rng.below(other.len());
                    out.truncate(at);
                    out.extend_from_slice(&other[from..]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_bounded() {
        let corpus = vec![b"hello world".to_vec(), vec![0u8; 100]];
        let run = |seed| {
            let mut rng = Rng::new(seed);
            (0..500)
                .map(|i| mutate(&mut rng, &corpus[i % 2], &corpus, 64))
                .collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7));
        assert_ne!(a, run(8));
        assert!(a.iter().all(|m| m.len() <= 64));
        // It changes things: most outputs differ from their input.
        let changed = a
            .iter()
            .enumerate()
            .filter(|(i, m)| **m != corpus[i % 2])
            .count();
        assert!(changed > 400, "{changed} of 500 changed");
    }
}
