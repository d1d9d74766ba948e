//! JSON forms of `kafka-protocol` messages: scenarios write requests as JSON objects with the
//! message's own field names (snake_case, as in `kafka-protocol`), and responses are compared
//! as JSON trees.
//!
//! Every message struct gets [`Json`] from its field list ([`json_struct!`], tables generated
//! in `messages.rs`); a field's conversion follows from its Rust type. Byte fields with a known
//! meaning are shown structurally, chosen by field name: `records` as decoded record batches
//! ([`crate::records`]), `metadata`/`member_metadata` and `assignment`/`member_assignment` as
//! consumer-protocol subscriptions and assignments when they decode as such.

use bytes::Bytes;
use protocol::messages::{BrokerId, GroupId, ProducerId, TopicName, TransactionalId};
use protocol::StrBytes;
use serde_json::Value;
use std::fmt;

/// A JSON value that does not fit the message field it is meant for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    /// Field path from the message root, innermost last.
    path: Vec<String>,
    reason: String,
}

impl JsonError {
    pub fn new(reason: impl Into<String>) -> JsonError {
        JsonError {
            path: Vec::new(),
            reason: reason.into(),
        }
    }

    /// Adds the field (or index) the error happened under.
    pub fn at(mut self, field: impl Into<String>) -> JsonError {
        self.path.insert(0, field.into());
        self
    }
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.path.join("."), self.reason)
        }
    }
}

impl std::error::Error for JsonError {}

/// Conversion of a message (or field) to and from JSON. `from_json` builds the value for a
/// message of version `version`: members for fields that version lacks are left out, so one
/// request written in a scenario serves every version.
pub trait Json: Sized {
    fn to_json(&self) -> Value;
    fn from_json(v: &Value, version: i16) -> Result<Self, JsonError>;

    /// As `to_json`, for a struct field called `field` (byte fields use the name).
    fn to_json_field(&self, _field: &str) -> Value {
        self.to_json()
    }

    /// As `from_json`, for a struct field called `field`.
    fn from_json_field(v: &Value, version: i16, _field: &str) -> Result<Self, JsonError> {
        Self::from_json(v, version)
    }
}

/// Implements [`Json`] for a message struct from its field names and the versions each field
/// exists in: an object with one member per field; unknown members are an error (a typo in a
/// scenario must not pass silently); missing members, and members for fields the version
/// lacks, keep the struct's default.
#[macro_export]
macro_rules! json_struct {
    ($t:path { $($f:ident: $lo:literal $hi:literal),* }) => {
        impl $crate::json::Json for $t {
            fn to_json(&self) -> serde_json::Value {
                #[allow(unused_mut)]
                let mut m = serde_json::Map::new();
                $( m.insert(
                    stringify!($f).to_string(),
                    $crate::json::Json::to_json_field(&self.$f, stringify!($f)),
                ); )*
                serde_json::Value::Object(m)
            }

            fn from_json(v: &serde_json::Value, version: i16) -> Result<Self, $crate::json::JsonError> {
                let obj = v
                    .as_object()
                    .ok_or_else(|| $crate::json::JsonError::new(format!("expected an object, got {v}")))?;
                #[allow(unused_mut)]
                let mut x = <$t>::default();
                for (k, val) in obj {
                    match k.as_str() {
                        $( stringify!($f) => {
                            let parsed = $crate::json::Json::from_json_field(val, version, stringify!($f))
                                .map_err(|e| e.at(k.as_str()))?;
                            if ($lo..=$hi).contains(&version) {
                                x.$f = parsed;
                            }
                        } )*
                        other => {
                            return Err($crate::json::JsonError::new(format!(
                                "unknown field '{other}'"
                            )))
                        }
                    }
                }
                Ok(x)
            }
        }
    };
}

macro_rules! json_int {
    ($($t:ty),*) => {$(
        impl Json for $t {
            fn to_json(&self) -> Value {
                Value::from(*self)
            }

            fn from_json(v: &Value, _version: i16) -> Result<Self, JsonError> {
                v.as_i64()
                    .and_then(|n| <$t>::try_from(n).ok())
                    .ok_or_else(|| JsonError::new(format!("expected {}, got {v}", stringify!($t))))
            }
        }
    )*};
}

json_int!(i8, i16, i32, i64, u16);

impl Json for f64 {
    fn to_json(&self) -> Value {
        serde_json::Number::from_f64(*self).map_or(Value::Null, Value::Number)
    }

    fn from_json(v: &Value, _version: i16) -> Result<Self, JsonError> {
        v.as_f64()
            .ok_or_else(|| JsonError::new(format!("expected a number, got {v}")))
    }
}

impl Json for bool {
    fn to_json(&self) -> Value {
        Value::Bool(*self)
    }

    fn from_json(v: &Value, _version: i16) -> Result<Self, JsonError> {
        v.as_bool()
            .ok_or_else(|| JsonError::new(format!("expected a bool, got {v}")))
    }
}

impl Json for StrBytes {
    fn to_json(&self) -> Value {
        Value::String(self.to_string())
    }

    fn from_json(v: &Value, _version: i16) -> Result<Self, JsonError> {
        v.as_str()
            .map(|s| StrBytes::from_string(s.to_string()))
            .ok_or_else(|| JsonError::new(format!("expected a string, got {v}")))
    }
}

impl Json for uuid::Uuid {
    fn to_json(&self) -> Value {
        Value::String(self.to_string())
    }

    fn from_json(v: &Value, _version: i16) -> Result<Self, JsonError> {
        v.as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| JsonError::new(format!("expected a uuid, got {v}")))
    }
}

/// Bytes in JSON: `"hex:0a0b"` for raw bytes, any other string for its UTF-8 bytes, or an
/// object describing structured content (record batches, consumer-protocol data).
impl Json for Bytes {
    fn to_json(&self) -> Value {
        Value::String(format!("hex:{}", hex(self)))
    }

    fn from_json(v: &Value, _version: i16) -> Result<Self, JsonError> {
        match v {
            Value::String(s) => match s.strip_prefix("hex:") {
                Some(h) => unhex(h).map(Bytes::from),
                None => Ok(Bytes::from(s.clone().into_bytes())),
            },
            Value::Object(_) => crate::records::bytes_from_spec(v),
            other => Err(JsonError::new(format!("expected bytes, got {other}"))),
        }
    }

    fn to_json_field(&self, field: &str) -> Value {
        match field {
            "records" => crate::records::batches_to_json(self),
            "metadata" | "member_metadata" | "assignment" | "member_assignment" => {
                crate::records::consumer_protocol_to_json(field, self)
                    .unwrap_or_else(|| self.to_json())
            }
            _ => self.to_json(),
        }
    }
}

impl<T: Json> Json for Option<T> {
    fn to_json(&self) -> Value {
        self.as_ref().map_or(Value::Null, Json::to_json)
    }

    fn from_json(v: &Value, version: i16) -> Result<Self, JsonError> {
        match v {
            Value::Null => Ok(None),
            v => T::from_json(v, version).map(Some),
        }
    }

    fn to_json_field(&self, field: &str) -> Value {
        self.as_ref()
            .map_or(Value::Null, |x| x.to_json_field(field))
    }

    fn from_json_field(v: &Value, version: i16, field: &str) -> Result<Self, JsonError> {
        match v {
            Value::Null => Ok(None),
            v => T::from_json_field(v, version, field).map(Some),
        }
    }
}

impl<T: Json> Json for Vec<T> {
    fn to_json(&self) -> Value {
        Value::Array(self.iter().map(Json::to_json).collect())
    }

    fn from_json(v: &Value, version: i16) -> Result<Self, JsonError> {
        let items = v
            .as_array()
            .ok_or_else(|| JsonError::new(format!("expected an array, got {v}")))?;
        items
            .iter()
            .enumerate()
            .map(|(i, x)| T::from_json(x, version).map_err(|e| e.at(i.to_string())))
            .collect()
    }
}

macro_rules! json_newtype {
    ($($t:ident($inner:ty)),*) => {$(
        impl Json for $t {
            fn to_json(&self) -> Value {
                self.0.to_json()
            }

            fn from_json(v: &Value, version: i16) -> Result<Self, JsonError> {
                <$inner>::from_json(v, version).map($t)
            }
        }
    )*};
}

json_newtype!(
    TopicName(StrBytes),
    GroupId(StrBytes),
    TransactionalId(StrBytes),
    BrokerId(i32),
    ProducerId(i64)
);

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Bytes of a hex string (whitespace ignored).
pub fn unhex(s: &str) -> Result<Vec<u8>, JsonError> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if !digits.len().is_multiple_of(2) {
        return Err(JsonError::new("odd number of hex digits"));
    }
    digits
        .chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or_else(|| JsonError::new(format!("bad hex digits in {s}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::messages::{MetadataRequest, MetadataResponse};
    use serde_json::json;

    #[test]
    fn requests_round_trip_and_typos_are_errors() {
        let v = json!({"topics": [{"name": "a"}], "allow_auto_topic_creation": false});
        let r = MetadataRequest::from_json(&v, 12).unwrap();
        assert_eq!(
            r.topics.as_ref().unwrap()[0]
                .name
                .as_ref()
                .unwrap()
                .0
                .as_str(),
            "a"
        );
        assert!(!r.allow_auto_topic_creation);
        assert_eq!(MetadataRequest::from_json(&r.to_json(), 12).unwrap(), r);
        let err = MetadataRequest::from_json(&json!({"topcs": null}), 12).unwrap_err();
        assert!(err.to_string().contains("topcs"), "{err}");
        let err = MetadataRequest::from_json(&json!({"topics": [{"name": 5}]}), 12).unwrap_err();
        assert_eq!(err.path, vec!["topics", "0", "name"]);
        // Members for fields the version lacks are left out: v3 has no auto-creation flag.
        let r = MetadataRequest::from_json(&v, 3).unwrap();
        assert!(r.allow_auto_topic_creation);
    }

    #[test]
    fn responses_show_every_field() {
        let v = MetadataResponse::default().to_json();
        for f in [
            "throttle_time_ms",
            "brokers",
            "cluster_id",
            "controller_id",
            "topics",
        ] {
            assert!(v.get(f).is_some(), "{f} missing in {v}");
        }
        assert!(v.get("unknown_tagged_fields").is_none());
    }

    #[test]
    fn bytes_forms() {
        assert_eq!(
            Bytes::from_json(&json!("hex:00ff"), 0).unwrap(),
            &[0u8, 255][..]
        );
        assert_eq!(Bytes::from_json(&json!("ab"), 0).unwrap(), &b"ab"[..]);
        assert!(Bytes::from_json(&json!("hex:0"), 0).is_err());
        assert_eq!(Bytes::from_static(b"\x01").to_json(), json!("hex:01"));
    }
}
