//! Kafka principals (`User:alice`) and Kafka's `DefaultKafkaPrincipalBuilder`: which principal a
//! connection acts as, from its security protocol and what authenticated it.

use crate::mapping::{MappingError, SslPrincipalMapper};
use std::fmt;

/// A principal as ACLs and `super.users` name it: `type:name` (Kafka's `KafkaPrincipal`).
/// Only the `User` type is built by the broker; other types come from ACLs and compare by
/// string.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KafkaPrincipal {
    pub principal_type: String,
    pub name: String,
}

/// The principal type every built-in authentication produces.
pub const USER_TYPE: &str = "User";

impl KafkaPrincipal {
    pub fn user(name: impl Into<String>) -> KafkaPrincipal {
        KafkaPrincipal {
            principal_type: USER_TYPE.to_string(),
            name: name.into(),
        }
    }

    /// `User:ANONYMOUS`: the principal of a PLAINTEXT connection, or of an SSL connection
    /// whose client sent no certificate.
    pub fn anonymous() -> KafkaPrincipal {
        KafkaPrincipal::user("ANONYMOUS")
    }

    /// `User:*`, the wildcard principal of ACLs.
    pub fn wildcard() -> KafkaPrincipal {
        KafkaPrincipal::user("*")
    }

    /// Parses `type:name` as Kafka's `SecurityUtils.parseKafkaPrincipal` does: split at the
    /// first `:`, both parts non-empty.
    pub fn parse(s: &str) -> Result<KafkaPrincipal, PrincipalError> {
        match s.split_once(':') {
            Some((t, n)) if !t.is_empty() && !n.is_empty() => Ok(KafkaPrincipal {
                principal_type: t.to_string(),
                name: n.to_string(),
            }),
            _ => Err(PrincipalError(s.to_string())),
        }
    }
}

impl fmt::Display for KafkaPrincipal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.principal_type, self.name)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("expected a principal of the form PrincipalType:name, got {0:?}")]
pub struct PrincipalError(pub String);

/// What authenticated a connection, as the principal builder sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authentication<'a> {
    /// PLAINTEXT, or SSL without a client certificate.
    None,
    /// SSL with a verified client certificate: its subject in RFC 2253 form (as Java's
    /// `X500Principal.getName()` writes it; see [`crate::dn`]).
    SslSubject(&'a str),
    /// SASL_PLAINTEXT / SASL_SSL: the authorization id the mechanism established.
    Sasl(&'a str),
}

/// Kafka's `DefaultKafkaPrincipalBuilder`: `User:ANONYMOUS` without authentication, the
/// certificate subject mapped by `ssl.principal.mapping.rules`, or the SASL authorization id.
#[derive(Clone, Debug, Default)]
pub struct PrincipalBuilder {
    ssl_mapper: SslPrincipalMapper,
}

impl PrincipalBuilder {
    pub fn new(ssl_mapper: SslPrincipalMapper) -> PrincipalBuilder {
        PrincipalBuilder { ssl_mapper }
    }

    /// The principal; an SSL subject no mapping rule applies to is an authentication failure
    /// (Kafka closes the connection).
    pub fn build(&self, auth: &Authentication<'_>) -> Result<KafkaPrincipal, MappingError> {
        match auth {
            Authentication::None => Ok(KafkaPrincipal::anonymous()),
            Authentication::SslSubject(dn) => Ok(KafkaPrincipal::user(self.ssl_mapper.name(dn)?)),
            Authentication::Sasl(id) => Ok(KafkaPrincipal::user(*id)),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parse_and_display() {
        let p = KafkaPrincipal::parse("User:alice").unwrap();
        assert_eq!(p, KafkaPrincipal::user("alice"));
        assert_eq!(p.to_string(), "User:alice");
        // Split at the first colon: names may contain colons.
        let q = KafkaPrincipal::parse("User:CN=a:b").unwrap();
        assert_eq!(q.name, "CN=a:b");
        assert!(KafkaPrincipal::parse("alice").is_err());
        assert!(KafkaPrincipal::parse("User:").is_err());
        assert!(KafkaPrincipal::parse(":x").is_err());
    }

    #[test]
    fn builder_follows_the_default_principal_builder() {
        let b = PrincipalBuilder::new(
            SslPrincipalMapper::parse("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L").unwrap(),
        );
        assert_eq!(
            b.build(&Authentication::None).unwrap(),
            KafkaPrincipal::anonymous()
        );
        assert_eq!(
            b.build(&Authentication::Sasl("bob")).unwrap(),
            KafkaPrincipal::user("bob")
        );
        assert_eq!(
            b.build(&Authentication::SslSubject("CN=Duke,OU=ServiceUsers,O=Org"))
                .unwrap(),
            KafkaPrincipal::user("duke")
        );
        assert!(b
            .build(&Authentication::SslSubject("CN=Duke,OU=Other"))
            .is_err());
        let default = PrincipalBuilder::default();
        assert_eq!(
            default
                .build(&Authentication::SslSubject("CN=x,O=y"))
                .unwrap(),
            KafkaPrincipal::user("CN=x,O=y")
        );
    }
}
