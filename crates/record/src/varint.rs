//! Zigzag varints and varlongs as Kafka's record format encodes them.

use crate::error::RecordError;

/// Reads a zigzag varint (at most 5 bytes) from `buf[*pos..]`, advancing `pos`.
pub fn read_varint(buf: &[u8], pos: &mut usize) -> Result<i32, RecordError> {
    let mut value: u32 = 0;
    for i in 0..5 {
        let b = *buf
            .get(*pos)
            .ok_or_else(|| RecordError::corrupt("truncated varint"))?;
        *pos += 1;
        // The fifth byte may only carry the top 4 bits.
        if i == 4 && b & 0xf0 != 0 {
            return Err(RecordError::corrupt("varint too long"));
        }
        value |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(((value >> 1) as i32) ^ -((value & 1) as i32));
        }
    }
    Err(RecordError::corrupt("varint too long"))
}

/// Reads a zigzag varlong (at most 10 bytes) from `buf[*pos..]`, advancing `pos`.
pub fn read_varlong(buf: &[u8], pos: &mut usize) -> Result<i64, RecordError> {
    let mut value: u64 = 0;
    for i in 0..10 {
        let b = *buf
            .get(*pos)
            .ok_or_else(|| RecordError::corrupt("truncated varlong"))?;
        *pos += 1;
        if i == 9 && b & 0xfe != 0 {
            return Err(RecordError::corrupt("varlong too long"));
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
        }
    }
    Err(RecordError::corrupt("varlong too long"))
}

/// Appends `v` as a zigzag varint.
pub fn write_varint(out: &mut Vec<u8>, v: i32) {
    let mut z = ((v << 1) ^ (v >> 31)) as u32;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// Appends `v` as a zigzag varlong.
pub fn write_varlong(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// The encoded size of `v` as a zigzag varint.
pub fn varint_len(v: i32) -> usize {
    let z = ((v << 1) ^ (v >> 31)) as u32;
    (32 - (z | 1).leading_zeros() as usize).div_ceil(7)
}

/// The encoded size of `v` as a zigzag varlong.
pub fn varlong_len(v: i64) -> usize {
    let z = ((v << 1) ^ (v >> 63)) as u64;
    (64 - (z | 1).leading_zeros() as usize).div_ceil(7)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_encodings() {
        let mut out = Vec::new();
        write_varint(&mut out, -1);
        assert_eq!(out, [1]);
        out.clear();
        write_varint(&mut out, 300);
        assert_eq!(out, [0xd8, 0x04]);
        let mut pos = 0;
        assert!(read_varint(&[0xff, 0xff, 0xff, 0xff, 0xff], &mut pos).is_err());
        let mut pos = 0;
        assert!(read_varint(&[0x80], &mut pos).is_err());
    }

    proptest! {
        #[test]
        fn varint_round_trip(v in any::<i32>()) {
            let mut out = Vec::new();
            write_varint(&mut out, v);
            prop_assert_eq!(out.len(), varint_len(v));
            let mut pos = 0;
            prop_assert_eq!(read_varint(&out, &mut pos).unwrap(), v);
            prop_assert_eq!(pos, out.len());
        }

        #[test]
        fn varlong_round_trip(v in any::<i64>()) {
            let mut out = Vec::new();
            write_varlong(&mut out, v);
            prop_assert_eq!(out.len(), varlong_len(v));
            let mut pos = 0;
            prop_assert_eq!(read_varlong(&out, &mut pos).unwrap(), v);
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..12)) {
            let mut pos = 0;
            let _ = read_varint(&bytes, &mut pos);
            let mut pos = 0;
            let _ = read_varlong(&bytes, &mut pos);
        }
    }
}
