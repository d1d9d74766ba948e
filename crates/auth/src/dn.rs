//! A certificate subject as the string Kafka's principal builder sees: Java's
//! `X500Principal.getName()` (RFC 2253): RDNs last-first, RFC 2253 keywords (CN, C, L, ST, O,
//! OU, STREET, DC, UID) or a dotted OID with the DER value in hex (`1.2.840.113549.1.9.1=#16...`),
//! special characters escaped with a backslash. `ssl.principal.mapping.rules` match this text,
//! so it has to be byte-for-byte what Kafka produces.

use x509_parser::der_parser::asn1_rs::{Any, Class, Tag};
use x509_parser::prelude::{FromDer, X509Certificate};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("cannot read the certificate's subject: {0}")]
pub struct SubjectError(String);

/// The RFC 2253 subject of a DER certificate.
pub fn certificate_subject(der: &[u8]) -> Result<String, SubjectError> {
    let (_, cert) = X509Certificate::from_der(der).map_err(|e| SubjectError(e.to_string()))?;
    let mut rdns: Vec<String> = Vec::new();
    for rdn in cert.subject().iter_rdn() {
        let avas: Vec<String> = rdn
            .iter()
            .map(|ava| attribute(&ava.attr_type().to_id_string(), ava.attr_value()))
            .collect();
        rdns.push(avas.join("+"));
    }
    rdns.reverse();
    Ok(rdns.join(","))
}

fn keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.9" => "STREET",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

fn attribute(oid: &str, value: &Any<'_>) -> String {
    let mut out = String::new();
    let key = keyword(oid);
    out.push_str(key.unwrap_or(oid));
    out.push('=');
    match (key, string_value(value)) {
        (Some(_), Some(text)) => out.push_str(&escape(&text)),
        _ => {
            out.push('#');
            for b in der_encoding(value) {
                out.push_str(&format!("{b:02x}"));
            }
        }
    }
    out
}

/// The value as text when it is one of the string types Java renders as text.
fn string_value(value: &Any<'_>) -> Option<String> {
    if value.header.class() != Class::Universal {
        return None;
    }
    let data = value.data;
    match value.header.tag() {
        Tag::PrintableString | Tag::Ia5String | Tag::Utf8String | Tag::GeneralString => {
            String::from_utf8(data.to_vec()).ok()
        }
        // T61 (Teletex) strings: Java reads them as ISO 8859-1.
        Tag::T61String => Some(data.iter().map(|&b| b as char).collect()),
        Tag::BmpString => {
            if !data.len().is_multiple_of(2) {
                return None;
            }
            let units: Vec<u16> = data
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

/// Java's `AVA.toRFC2253String` escaping: `,=+<>#;"\` anywhere, and leading and trailing
/// spaces (and carriage returns).
fn escape(text: &str) -> String {
    const ESCAPEES: &str = ",=+<>#;\"\\";
    let mut escaped: Vec<(char, bool)> = Vec::with_capacity(text.len());
    for c in text.chars() {
        if ESCAPEES.contains(c) {
            escaped.push(('\\', true));
        }
        escaped.push((c, false));
    }
    let blank = |c: char| c == ' ' || c == '\r';
    let lead = escaped
        .iter()
        .position(|(c, _)| !blank(*c))
        .unwrap_or(escaped.len());
    let trail = escaped.iter().rposition(|(c, _)| !blank(*c));
    let mut out = String::with_capacity(escaped.len() + 2);
    for (i, (c, _)) in escaped.iter().enumerate() {
        let outside = i < lead || trail.is_none_or(|t| i > t);
        if outside {
            out.push('\\');
        }
        out.push(*c);
    }
    out
}

/// The DER encoding (identifier, length, contents) of a value, for the `#hex` form.
fn der_encoding(value: &Any<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.data.len() + 6);
    let class = match value.header.class() {
        Class::Universal => 0u8,
        Class::Application => 1,
        Class::ContextSpecific => 2,
        Class::Private => 3,
    };
    let constructed = u8::from(value.header.is_constructed());
    let tag = value.header.tag().0;
    if tag < 31 {
        out.push((class << 6) | (constructed << 5) | tag as u8);
    } else {
        out.push((class << 6) | (constructed << 5) | 0x1f);
        let mut groups = Vec::new();
        let mut t = tag;
        loop {
            groups.push((t & 0x7f) as u8);
            t >>= 7;
            if t == 0 {
                break;
            }
        }
        for (i, g) in groups.iter().rev().enumerate() {
            out.push(if i + 1 < groups.len() { g | 0x80 } else { *g });
        }
    }
    let len = value.data.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(value.data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_follows_java() {
        assert_eq!(escape("Tkac, Adam"), r"Tkac\, Adam");
        assert_eq!(escape("a+b=c"), r"a\+b\=c");
        assert_eq!(escape(" x "), r"\ x\ ");
        assert_eq!(escape("#1"), r"\#1");
        assert_eq!(escape("q\"uote\\"), r#"q\"uote\\"#);
        assert_eq!(escape("plain"), "plain");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(certificate_subject(&[]).is_err());
        assert!(certificate_subject(&[0x30, 0x82, 0xff, 0xff, 1, 2, 3]).is_err());
    }
}
