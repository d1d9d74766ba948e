//! A certificate subject as the string Kafka's principal builder sees: Java's
//! `X500Principal.getName()` (RFC 2253): RDNs last-first, RFC 2253 keywords (CN, C, L, ST, O,
//! OU, STREET, DC, UID) or a dotted OID with the DER value in hex (`1.2.840.113549.1.9.1=#16...`),
//! special characters escaped with a backslash. `ssl.principal.mapping.rules` match this text,
//! so it has to be byte-for-byte what Kafka produces.

use x509_parser::der_parser::asn1_rs::{Any, Class, Tag};
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate, X509Name};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("cannot read the certificate's subject: {0}")]
pub struct SubjectError(String);

/// The RFC 2253 subject of a DER certificate.
pub fn certificate_subject(der: &[u8]) -> Result<String, SubjectError> {
    let (_, cert) = X509Certificate::from_der(der).map_err(|e| SubjectError(e.to_string()))?;
    Ok(rdns(cert.subject()).join(","))
}

/// A name's RDNs in RFC 2253 form, last-first (as `getName()` lists them).
fn rdns(name: &X509Name<'_>) -> Vec<String> {
    let mut rdns: Vec<String> = Vec::new();
    for rdn in name.iter_rdn() {
        let avas: Vec<String> = rdn
            .iter()
            .map(|ava| attribute(&ava.attr_type().to_id_string(), ava.attr_value()))
            .collect();
        rdns.push(avas.join("+"));
    }
    rdns.reverse();
    rdns
}

/// What Kafka compares when a listener's keystore is replaced at runtime
/// (`SslFactory.CertificateEntries`): the certificate's subject and its SubjectAltNames, each
/// as Java's `X509Certificate.getSubjectAlternativeNames()` gives it (type number, text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertificateIdentity {
    /// The subject's RDNs in RFC 2253 form, last-first.
    pub subject_rdns: Vec<String>,
    /// The subject's DER encoding.
    pub subject_der: Vec<u8>,
    /// (GeneralName type, value): 1 rfc822Name, 2 dNSName, 4 directoryName (RFC 2253), 6 URI,
    /// 7 iPAddress (Java's text: IPv6 uncompressed), 8 registeredID; other types as DER hex.
    pub subject_alt_names: Vec<(u8, String)>,
}

impl CertificateIdentity {
    /// The subject as `X500Principal.getName()` (RFC 2253).
    pub fn subject(&self) -> String {
        self.subject_rdns.join(",")
    }

    /// The subject as `X500Principal.toString()` prints it in Kafka's messages.
    pub fn subject_display(&self) -> String {
        self.subject_rdns.join(", ")
    }

    /// The SubjectAltNames as Java prints the set (`[[2, localhost], [7, 127.0.0.1]]`).
    pub fn san_display(&self) -> String {
        let entries: Vec<String> = self
            .subject_alt_names
            .iter()
            .map(|(t, v)| format!("[{t}, {v}]"))
            .collect();
        format!("[{}]", entries.join(", "))
    }

    /// Kafka's `CertificateEntries.ensureCompatible` for a PEM keystore (one entry, alias
    /// `kafka`): unless `allow_dn_changes`, the new subject must be the old one (the same DER,
    /// or the same RFC 2253 name ignoring case); unless `allow_san_changes`, the new
    /// SubjectAltNames must include every old one (more are allowed). The error is Kafka's
    /// message.
    pub fn ensure_compatible(
        &self,
        new: &CertificateIdentity,
        allow_dn_changes: bool,
        allow_san_changes: bool,
    ) -> Result<(), String> {
        const ALIAS: &str = "kafka";
        if !allow_dn_changes
            && self.subject_der != new.subject_der
            && !self.subject().eq_ignore_ascii_case(&new.subject())
        {
            return Err(format!(
                "Keystore DistinguishedName does not match:  existing={{alias={ALIAS}, DN={}}}, new={{alias={ALIAS}, DN={}}}",
                self.subject_display(),
                new.subject_display()
            ));
        }
        if !allow_san_changes
            && !self
                .subject_alt_names
                .iter()
                .all(|san| new.subject_alt_names.contains(san))
        {
            return Err(format!(
                "Keystore SubjectAltNames do not match:  existing={{alias={ALIAS}, SAN={}}}, new={{alias={ALIAS}, SAN={}}}",
                self.san_display(),
                new.san_display()
            ));
        }
        Ok(())
    }
}

/// The subject and SubjectAltNames of a DER certificate.
pub fn certificate_identity(der: &[u8]) -> Result<CertificateIdentity, SubjectError> {
    let (_, cert) = X509Certificate::from_der(der).map_err(|e| SubjectError(e.to_string()))?;
    let mut subject_alt_names = Vec::new();
    let sans = cert
        .subject_alternative_name()
        .map_err(|e| SubjectError(e.to_string()))?;
    for name in sans.iter().flat_map(|ext| ext.value.general_names.iter()) {
        subject_alt_names.push(general_name(name));
    }
    let mut seen = std::collections::HashSet::new();
    subject_alt_names.retain(|san| seen.insert(san.clone()));
    Ok(CertificateIdentity {
        subject_rdns: rdns(cert.subject()),
        subject_der: cert.subject().as_raw().to_vec(),
        subject_alt_names,
    })
}

/// A GeneralName as Java's `getSubjectAlternativeNames()` entry: its type number and value.
fn general_name(name: &GeneralName<'_>) -> (u8, String) {
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    match name {
        GeneralName::OtherName(oid, value) => (0, format!("{}:{}", oid.to_id_string(), hex(value))),
        GeneralName::RFC822Name(v) => (1, v.to_string()),
        GeneralName::DNSName(v) => (2, v.to_string()),
        GeneralName::X400Address(v) => (3, hex(v.data)),
        GeneralName::DirectoryName(n) => (4, rdns(n).join(",")),
        GeneralName::EDIPartyName(v) => (5, hex(v.data)),
        GeneralName::URI(v) => (6, v.to_string()),
        GeneralName::IPAddress(b) => (7, ip_text(b)),
        GeneralName::RegisteredID(oid) => (8, oid.to_id_string()),
        GeneralName::Invalid(tag, b) => (tag.0.min(255) as u8, hex(b)),
    }
}

/// An iPAddress as Java prints it: dotted IPv4, IPv6 as eight uncompressed hex groups.
fn ip_text(b: &[u8]) -> String {
    match b.len() {
        4 => format!("{}.{}.{}.{}", b[0], b[1], b[2], b[3]),
        16 => b
            .chunks_exact(2)
            .map(|c| format!("{:x}", u16::from_be_bytes([c[0], c[1]])))
            .collect::<Vec<_>>()
            .join(":"),
        _ => b.iter().map(|x| format!("{x:02x}")).collect(),
    }
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
        assert!(certificate_identity(&[]).is_err());
        assert!(certificate_identity(&[0x30, 0x82, 0xff, 0xff, 1, 2, 3]).is_err());
    }

    fn identity(rdns: &[&str], der: &[u8], sans: &[(u8, &str)]) -> CertificateIdentity {
        CertificateIdentity {
            subject_rdns: rdns.iter().map(|r| r.to_string()).collect(),
            subject_der: der.to_vec(),
            subject_alt_names: sans.iter().map(|(t, v)| (*t, v.to_string())).collect(),
        }
    }

    #[test]
    fn a_new_keystore_keeps_the_subject_and_the_alt_names_as_kafka_requires() {
        let old = identity(
            &["CN=broker", "O=Moldau"],
            b"a",
            &[(2, "localhost"), (7, "127.0.0.1")],
        );
        // Renewed: the same identity (a new key and validity are not compared).
        assert_eq!(old.ensure_compatible(&old.clone(), false, false), Ok(()));
        // The same RFC 2253 name in another case or encoding is the same subject.
        let recased = identity(
            &["cn=BROKER", "o=moldau"],
            b"b",
            &old.subject_alt_names
                .iter()
                .map(|(t, v)| (*t, v.as_str()))
                .collect::<Vec<_>>(),
        );
        assert_eq!(old.ensure_compatible(&recased, false, false), Ok(()));
        // Another subject: Kafka's message, unless DN changes are allowed.
        let other = identity(
            &["CN=other", "O=Moldau"],
            b"c",
            &[(2, "localhost"), (7, "127.0.0.1")],
        );
        assert_eq!(
            old.ensure_compatible(&other, false, false),
            Err("Keystore DistinguishedName does not match:  existing={alias=kafka, DN=CN=broker, O=Moldau}, new={alias=kafka, DN=CN=other, O=Moldau}".to_string())
        );
        assert_eq!(old.ensure_compatible(&other, true, false), Ok(()));
        // More alt names are fine; one missing is not, unless SAN changes are allowed.
        let more = identity(
            &["CN=broker", "O=Moldau"],
            b"a",
            &[(7, "127.0.0.1"), (2, "localhost"), (2, "b1")],
        );
        assert_eq!(old.ensure_compatible(&more, false, false), Ok(()));
        let fewer = identity(&["CN=broker", "O=Moldau"], b"a", &[(2, "localhost")]);
        assert_eq!(
            old.ensure_compatible(&fewer, false, false),
            Err("Keystore SubjectAltNames do not match:  existing={alias=kafka, SAN=[[2, localhost], [7, 127.0.0.1]]}, new={alias=kafka, SAN=[[2, localhost]]}".to_string())
        );
        assert_eq!(old.ensure_compatible(&fewer, false, true), Ok(()));
        // The subject is checked first.
        assert!(old
            .ensure_compatible(&identity(&["CN=x"], b"x", &[]), false, false)
            .unwrap_err()
            .starts_with("Keystore DistinguishedName"));
    }

    #[test]
    fn ip_alt_names_read_as_java_prints_them() {
        assert_eq!(ip_text(&[127, 0, 0, 1]), "127.0.0.1");
        let mut v6 = [0u8; 16];
        v6[15] = 1;
        assert_eq!(ip_text(&v6), "0:0:0:0:0:0:0:1");
    }
}
