//! Structured byte fields: record batches described in scenarios (built with the `record`
//! crate, optionally corrupted on purpose) and decoded from responses; consumer-protocol
//! subscriptions and assignments.

use crate::json::{hex, Json, JsonError};
use bytes::{Bytes, BytesMut};
use protocol::messages::{ConsumerProtocolAssignment, ConsumerProtocolSubscription};
use protocol::{Decode, Encode};
use record::{BatchBuilder, BatchHeader, BatchSplitter, Compression, NewRecord, TimestampKind};
use serde_json::{json, Map, Value};
use std::time::{SystemTime, UNIX_EPOCH};

/// Largest decompressed batch the harness decodes from a response.
const DECODE_BYTES_MAX: usize = 64 << 20;
/// Offsets inside a v2 batch header (Kafka's `DefaultRecordBatch`).
const MAGIC_OFFSET: usize = 16;
const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;
const RECORDS_COUNT_OFFSET: usize = 57;

/// Builds the bytes an object in a scenario describes: `{"batches": [...]}` (record batches,
/// see [`batch_from_spec`]), `{"subscription": {...}, "version": N}` or
/// `{"assignment": {...}, "version": N}` (consumer protocol).
pub fn bytes_from_spec(v: &Value) -> Result<Bytes, JsonError> {
    let obj = v
        .as_object()
        .ok_or_else(|| JsonError::new("expected an object"))?;
    let version = match obj.get("version") {
        Some(v) => i16::from_json(v, 0).map_err(|e| e.at("version"))?,
        None => 0,
    };
    let mut out = BytesMut::new();
    if let Some(batches) = obj.get("batches") {
        let batches = batches
            .as_array()
            .ok_or_else(|| JsonError::new("expected an array").at("batches"))?;
        for (i, b) in batches.iter().enumerate() {
            out.extend_from_slice(
                &batch_from_spec(b).map_err(|e| e.at(i.to_string()).at("batches"))?,
            );
        }
        return Ok(out.freeze());
    }
    let encoded = if let Some(s) = obj.get("subscription") {
        let sub = ConsumerProtocolSubscription::from_json(s, version)
            .map_err(|e| e.at("subscription"))?;
        out.extend_from_slice(&version.to_be_bytes());
        sub.encode(&mut out, version)
    } else if let Some(a) = obj.get("assignment") {
        let asg =
            ConsumerProtocolAssignment::from_json(a, version).map_err(|e| e.at("assignment"))?;
        out.extend_from_slice(&version.to_be_bytes());
        asg.encode(&mut out, version)
    } else {
        return Err(JsonError::new(
            "expected one of 'batches', 'subscription', 'assignment'",
        ));
    };
    encoded.map_err(|e| JsonError::new(format!("encode: {e}")))?;
    Ok(out.freeze())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A timestamp in a spec: a number, `"now"`, or `"now+MS"` / `"now-MS"` (the harness's clock
/// when the request is built, for tests of timestamp bounds).
fn timestamp(v: &Value) -> Result<i64, JsonError> {
    if let Some(n) = v.as_i64() {
        return Ok(n);
    }
    let s = v
        .as_str()
        .ok_or_else(|| JsonError::new(format!("expected a timestamp, got {v}")))?;
    let rest = s
        .strip_prefix("now")
        .ok_or_else(|| JsonError::new(format!("bad timestamp {s}")))?;
    let delta = match rest {
        "" => 0,
        r => r
            .parse::<i64>()
            .map_err(|_| JsonError::new(format!("bad timestamp {s}")))?,
    };
    Ok(now_ms() + delta)
}

/// A key or value: null, a string with `{i}` replaced by the record's index, or
/// `{"size": N}` (N bytes of 'x').
fn payload(v: Option<&Value>, i: usize, default: &str) -> Result<Option<Bytes>, JsonError> {
    match v {
        None => Ok(Some(Bytes::from(default.replace("{i}", &i.to_string())))),
        Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => match s.strip_prefix("hex:") {
            Some(h) => crate::json::unhex(h).map(|b| Some(Bytes::from(b))),
            None => Ok(Some(Bytes::from(s.replace("{i}", &i.to_string())))),
        },
        Some(Value::Object(o)) => {
            let size = o
                .get("size")
                .and_then(Value::as_u64)
                .ok_or_else(|| JsonError::new("expected {\"size\": N}"))?;
            Ok(Some(Bytes::from(vec![b'x'; size as usize])))
        }
        Some(other) => Err(JsonError::new(format!("bad payload {other}"))),
    }
}

fn field<'a>(o: &'a Map<String, Value>, k: &str) -> Option<&'a Value> {
    o.get(k)
}

fn opt<T: Json>(o: &Map<String, Value>, k: &str, default: T) -> Result<T, JsonError> {
    match o.get(k) {
        Some(v) => T::from_json(v, 0).map_err(|e| e.at(k)),
        None => Ok(default),
    }
}

/// Builds one v2 batch from a spec object:
/// - `count` (default 1), `key` / `value` (templates with `{i}`, `null`, `{"size": N}`;
///   defaults `"k{i}"` / `"v{i}"`), `timestamp` (number or `"now±MS"`, default 1000000 + i),
///   `headers` (`[[key, value], ...]`), or `records` (a list of `{key, value, timestamp,
///   headers}`) instead of `count`;
/// - `compression` (none, gzip, snappy, lz4, zstd), `producer_id`, `producer_epoch`,
///   `base_sequence`, `transactional`, `control`, `timestamp_type` ("create" or
///   "log_append"), `base_offset`, `partition_leader_epoch`;
/// - `corrupt`: "crc" (flip a CRC bit), "magic0"/"magic1"/"magic3" (another magic byte),
///   "records_count" (claim one record more), "truncate" (drop the last byte, length kept),
///   "short_length" (a batch length of 13, below the smallest record overhead).
pub fn batch_from_spec(v: &Value) -> Result<Bytes, JsonError> {
    let o = v
        .as_object()
        .ok_or_else(|| JsonError::new("expected an object"))?;
    let known = [
        "count",
        "key",
        "value",
        "timestamp",
        "headers",
        "records",
        "compression",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "transactional",
        "control",
        "timestamp_type",
        "base_offset",
        "partition_leader_epoch",
        "corrupt",
    ];
    if let Some(k) = o.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(JsonError::new(format!("unknown batch field '{k}'")));
    }
    let compression = match field(o, "compression").and_then(Value::as_str) {
        None => Compression::None,
        Some(c) => Compression::from_name(c)
            .ok_or_else(|| JsonError::new(format!("unknown compression {c}")))?,
    };
    let mut b = BatchBuilder::new(compression)
        .base_offset(opt(o, "base_offset", 0i64)?)
        .partition_leader_epoch(opt(o, "partition_leader_epoch", -1i32)?)
        .producer(
            opt(o, "producer_id", -1i64)?,
            opt(o, "producer_epoch", -1i16)?,
            opt(o, "base_sequence", -1i32)?,
        )
        .transactional(opt(o, "transactional", false)?)
        .control(opt(o, "control", false)?);
    if field(o, "timestamp_type").and_then(Value::as_str) == Some("log_append") {
        b = b.timestamp_type(TimestampKind::LogAppendTime);
    }
    let headers = |h: Option<&Value>| -> Result<Vec<(Bytes, Option<Bytes>)>, JsonError> {
        let Some(h) = h else { return Ok(Vec::new()) };
        let pairs: Vec<(String, Option<String>)> = match h.as_array() {
            Some(a) => a
                .iter()
                .map(|p| {
                    let k = p.get(0).and_then(Value::as_str);
                    let v = p.get(1).map(|v| v.as_str().map(str::to_string));
                    match (k, v) {
                        (Some(k), Some(v)) => Ok((k.to_string(), v)),
                        _ => Err(JsonError::new("headers are [key, value] pairs")),
                    }
                })
                .collect::<Result<_, _>>()?,
            None => return Err(JsonError::new("headers are [key, value] pairs")),
        };
        Ok(pairs
            .into_iter()
            .map(|(k, v)| (Bytes::from(k), v.map(Bytes::from)))
            .collect())
    };
    let record = |r: &Map<String, Value>, i: usize| -> Result<NewRecord, JsonError> {
        let ts = match r.get("timestamp") {
            Some(t) => timestamp(t)?,
            None => 1_000_000 + i as i64,
        };
        let mut rec = NewRecord::new(
            payload(r.get("key"), i, "k{i}")?,
            payload(r.get("value"), i, "v{i}")?,
            ts,
        );
        for (k, v) in headers(r.get("headers"))? {
            rec = rec.header(k, v);
        }
        Ok(rec)
    };
    match field(o, "records") {
        Some(list) => {
            let list = list
                .as_array()
                .ok_or_else(|| JsonError::new("expected an array").at("records"))?;
            for (i, r) in list.iter().enumerate() {
                let r = r
                    .as_object()
                    .ok_or_else(|| JsonError::new("expected an object").at(i.to_string()))?;
                b.push(record(r, i).map_err(|e| e.at(i.to_string()).at("records"))?);
            }
        }
        None => {
            let count = usize::try_from(opt(o, "count", 1i32)?).unwrap_or(0);
            for i in 0..count {
                b.push(record(o, i)?);
            }
        }
    }
    let built = b
        .build()
        .map_err(|e| JsonError::new(format!("build batch: {e}")))?;
    let mut bytes = built.to_vec();
    match field(o, "corrupt").and_then(Value::as_str) {
        None => {}
        Some("crc") => bytes[CRC_OFFSET + 3] ^= 0x01,
        Some("magic0") => bytes[MAGIC_OFFSET] = 0,
        Some("magic1") => bytes[MAGIC_OFFSET] = 1,
        Some("magic3") => bytes[MAGIC_OFFSET] = 3,
        Some("short_length") => bytes[8..12].copy_from_slice(&13i32.to_be_bytes()),
        Some("records_count") => {
            let n = i32::from_be_bytes([
                bytes[RECORDS_COUNT_OFFSET],
                bytes[RECORDS_COUNT_OFFSET + 1],
                bytes[RECORDS_COUNT_OFFSET + 2],
                bytes[RECORDS_COUNT_OFFSET + 3],
            ]);
            bytes[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4]
                .copy_from_slice(&(n + 1).to_be_bytes());
            record::recompute_crc(&mut bytes)
                .map_err(|e| JsonError::new(format!("recompute crc: {e}")))?;
        }
        Some("truncate") => {
            bytes.pop();
        }
        Some(other) => return Err(JsonError::new(format!("unknown corruption {other}"))),
    }
    Ok(Bytes::from(bytes))
}

/// Bytes shown as text when they are printable UTF-8, else as `hex:...`.
fn text_or_hex(b: &[u8]) -> Value {
    match std::str::from_utf8(b) {
        Ok(s) if s.chars().all(|c| !c.is_control()) => Value::String(s.to_string()),
        _ => Value::String(format!("hex:{}", hex(b))),
    }
}

/// The record batches in a `records` field, decoded: header fields, whether the CRC holds,
/// and the records; a trailing partial batch (Fetch may end with one) as its size.
pub fn batches_to_json(buf: &Bytes) -> Value {
    let mut out = Vec::new();
    let mut split = BatchSplitter::new(buf);
    loop {
        let at = split.position();
        let Some(item) = split.next() else { break };
        let Ok((_, raw)) = item else {
            out.push(json!({"partial_bytes": buf.len() - at}));
            break;
        };
        out.push(batch_to_json(&buf.slice(at..at + raw.len())));
    }
    Value::Array(out)
}

fn batch_to_json(batch: &Bytes) -> Value {
    let Ok(h) = BatchHeader::parse(batch) else {
        return json!({"unparsable": format!("hex:{}", hex(batch))});
    };
    let crc_ok =
        batch.len() > ATTRIBUTES_OFFSET && crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..]) == h.crc;
    let mut v = json!({
        "base_offset": h.base_offset,
        "batch_length": h.batch_length,
        "partition_leader_epoch": h.partition_leader_epoch,
        "magic": h.magic,
        "crc_ok": crc_ok,
        "attributes": h.attributes,
        "last_offset_delta": h.last_offset_delta,
        "base_timestamp": h.base_timestamp,
        "max_timestamp": h.max_timestamp,
        "producer_id": h.producer_id,
        "producer_epoch": h.producer_epoch,
        "base_sequence": h.base_sequence,
        "records_count": h.records_count,
    });
    let records = match record::decode_records(batch, DECODE_BYTES_MAX) {
        Ok((_, iter)) => iter
            .map(|r| match r {
                Ok(r) => json!({
                    "offset": r.offset,
                    "timestamp": r.timestamp,
                    "key": r.key.as_deref().map(text_or_hex),
                    "value": r.value.as_deref().map(text_or_hex),
                    "headers": r.headers.iter().map(|h| json!([
                        text_or_hex(&h.key),
                        h.value.as_deref().map(text_or_hex),
                    ])).collect::<Vec<_>>(),
                }),
                Err(e) => json!({"error": e.to_string()}),
            })
            .collect(),
        Err(e) => vec![json!({"error": e.to_string()})],
    };
    v["records"] = Value::Array(records);
    v
}

/// A consumer-protocol subscription (`metadata`, `member_metadata`) or assignment
/// (`assignment`, `member_assignment`), when the bytes decode as one exactly.
pub fn consumer_protocol_to_json(field: &str, b: &Bytes) -> Option<Value> {
    if b.len() < 2 {
        return None;
    }
    let version = i16::from_be_bytes([b[0], b[1]]);
    let mut body = b.slice(2..);
    let v = if field.ends_with("metadata") {
        let s = ConsumerProtocolSubscription::decode(&mut body, version).ok()?;
        json!({"subscription": s.to_json(), "version": version})
    } else {
        let a = ConsumerProtocolAssignment::decode(&mut body, version).ok()?;
        json!({"assignment": a.to_json(), "version": version})
    };
    body.is_empty().then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_batches_decode_back() {
        let spec = json!({"batches": [
            {"count": 2, "compression": "gzip"},
            {"records": [{"key": null, "value": "x", "timestamp": 7, "headers": [["h", null]]}]}
        ]});
        let b = bytes_from_spec(&spec).unwrap();
        let v = batches_to_json(&b);
        assert_eq!(v[0]["records"][1]["value"], "v1");
        assert_eq!(v[0]["records"][0]["timestamp"], 1_000_000);
        assert_eq!(v[0]["crc_ok"], true);
        assert_eq!(v[1]["records"][0]["key"], Value::Null);
        assert_eq!(v[1]["records"][0]["headers"][0][0], "h");
    }

    #[test]
    fn corruptions_are_visible() {
        let crc = batch_from_spec(&json!({"corrupt": "crc"})).unwrap();
        assert_eq!(batches_to_json(&crc)[0]["crc_ok"], false);
        let cut = batch_from_spec(&json!({"corrupt": "truncate"})).unwrap();
        assert!(batches_to_json(&cut)[0].get("partial_bytes").is_some());
        assert!(batch_from_spec(&json!({"corrupt": "nonsense"})).is_err());
        assert!(batch_from_spec(&json!({"cuont": 1})).is_err());
    }

    #[test]
    fn consumer_protocol_round_trip() {
        let spec = json!({"subscription": {"topics": ["a", "b"]}, "version": 1});
        let b = bytes_from_spec(&spec).unwrap();
        let v = consumer_protocol_to_json("metadata", &b).unwrap();
        assert_eq!(v["subscription"]["topics"], json!(["a", "b"]));
        assert_eq!(v["version"], 1);
        assert!(consumer_protocol_to_json("metadata", &Bytes::from_static(b"\x00")).is_none());
    }
}
