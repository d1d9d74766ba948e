//! SASL mechanisms on the server side: the mechanism names, PLAIN (RFC 4616, as Kafka's
//! `PlainSaslServer`), SCRAM (see [`crate::scram`]), the credential lookups they need, and
//! Kafka's split between failures whose message the client sees
//! (`SaslAuthenticationException`) and failures answered with a generic message
//! (`SaslException`: the detail could tell an attacker which users exist).

use crate::scram::{ScramCredential, ScramCredentials, ScramMechanism, ScramServer};
use std::collections::BTreeMap;
use std::fmt;
use subtle::ConstantTimeEq;

/// A SASL mechanism the broker can serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mechanism {
    Plain,
    Scram(ScramMechanism),
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::Scram(m) => m.name(),
        }
    }

    /// The mechanism for a name as Kafka spells it (case-sensitive, as Kafka compares).
    pub fn from_name(name: &str) -> Option<Mechanism> {
        if name == "PLAIN" {
            return Some(Mechanism::Plain);
        }
        ScramMechanism::from_name(name).map(Mechanism::Scram)
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an exchange failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SaslError {
    /// Kafka's `SaslAuthenticationException`: the message goes to the client as is.
    #[error("{0}")]
    Authentication(String),
    /// Kafka's `SaslException`: logged; the client gets Kafka's generic message.
    #[error("{0}")]
    Credentials(String),
    /// A token after the exchange finished or failed.
    #[error("{0}")]
    IllegalState(String),
    /// Input Kafka does not treat as an authentication failure (it throws an unchecked
    /// exception): the connection is closed without an answer.
    #[error("{0}")]
    Malformed(String),
}

/// Where SASL/PLAIN checks passwords: the `user_<name>="<password>"` entries of the
/// listener's JAAS config first, then (a Moldau extension, so one user store serves every
/// mechanism) the user's SCRAM credentials.
pub trait PlainCredentials: ScramCredentials {
    /// The password configured for `user` in the JAAS config, if any.
    fn plain_password(&self, user: &str) -> Option<&str>;
}

/// The credentials a SASL exchange may consult: static PLAIN users and SCRAM credentials.
/// The broker builds one from its config and the current metadata image.
#[derive(Clone, Debug, Default)]
pub struct CredentialSet {
    /// `user_<name>="<password>"` from `listener.name.<l>.plain.sasl.jaas.config`.
    pub plain_users: BTreeMap<String, String>,
    pub scram: BTreeMap<(String, ScramMechanism), ScramCredential>,
}

impl ScramCredentials for CredentialSet {
    fn scram_credential(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
        self.scram.get(&(user.to_string(), mechanism)).cloned()
    }
}

impl PlainCredentials for CredentialSet {
    fn plain_password(&self, user: &str) -> Option<&str> {
        self.plain_users.get(user).map(String::as_str)
    }
}

/// Checks a PLAIN password: the JAAS entry when the user has one, else any SCRAM credential
/// of the user.
fn plain_password_ok(credentials: &dyn PlainCredentials, user: &str, password: &str) -> bool {
    if let Some(expected) = credentials.plain_password(user) {
        return expected.as_bytes().ct_eq(password.as_bytes()).into();
    }
    ScramMechanism::ALL.into_iter().any(|m| {
        credentials
            .scram_credential(user, m)
            .is_some_and(|c| c.verifies(m, password))
    })
}

/// One SASL exchange on the server side.
#[derive(Debug)]
pub enum SaslServer {
    Plain { authorization_id: Option<String> },
    Scram(Box<ScramServer>),
}

impl SaslServer {
    pub fn new(mechanism: Mechanism) -> SaslServer {
        match mechanism {
            Mechanism::Plain => SaslServer::Plain {
                authorization_id: None,
            },
            Mechanism::Scram(m) => SaslServer::Scram(Box::new(ScramServer::new(m))),
        }
    }

    pub fn mechanism(&self) -> Mechanism {
        match self {
            SaslServer::Plain { .. } => Mechanism::Plain,
            SaslServer::Scram(s) => Mechanism::Scram(s.mechanism()),
        }
    }

    pub fn is_complete(&self) -> bool {
        match self {
            SaslServer::Plain { authorization_id } => authorization_id.is_some(),
            SaslServer::Scram(s) => s.is_complete(),
        }
    }

    pub fn authorization_id(&self) -> Option<&str> {
        match self {
            SaslServer::Plain { authorization_id } => authorization_id.as_deref(),
            SaslServer::Scram(s) => s.authorization_id(),
        }
    }

    /// Evaluates the client's token; the reply goes back to the client.
    pub fn evaluate(
        &mut self,
        token: &[u8],
        server_nonce: &str,
        credentials: &dyn PlainCredentials,
    ) -> Result<Vec<u8>, SaslError> {
        match self {
            SaslServer::Plain { authorization_id } => {
                if authorization_id.is_some() {
                    return Err(SaslError::IllegalState(
                        "Unexpected challenge in Sasl server state COMPLETE".into(),
                    ));
                }
                let user = plain(token, credentials)?;
                *authorization_id = Some(user);
                Ok(Vec::new())
            }
            SaslServer::Scram(s) => s.evaluate(token, server_nonce, credentials),
        }
    }
}

/// Kafka's `PlainSaslServer.evaluateResponse`: `[authzid] NUL authcid NUL passwd`, split
/// into at most three parts (a password may contain NULs).
fn plain(token: &[u8], credentials: &dyn PlainCredentials) -> Result<String, SaslError> {
    let response = String::from_utf8_lossy(token);
    let mut parts = response.splitn(3, '\0');
    let authzid = parts.next().unwrap_or("");
    let username = parts.next().unwrap_or("");
    let password = parts.next().unwrap_or("");
    if username.is_empty() {
        return Err(SaslError::Credentials(
            "Authentication failed: username not specified".into(),
        ));
    }
    if password.is_empty() {
        return Err(SaslError::Credentials(
            "Authentication failed: password not specified".into(),
        ));
    }
    if !plain_password_ok(credentials, username, password) {
        return Err(SaslError::Authentication(
            "Authentication failed: Invalid username or password".into(),
        ));
    }
    if !authzid.is_empty() && authzid != username {
        return Err(SaslError::Authentication(
            "Authentication failed: Client requested an authorization id that is different from username".into(),
        ));
    }
    Ok(username.to_string())
}

/// The PLAIN token a client sends.
pub fn plain_token(username: &str, password: &str) -> Vec<u8> {
    format!("\0{username}\0{password}").into_bytes()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn creds() -> CredentialSet {
        let mut c = CredentialSet::default();
        c.plain_users.insert("admin".into(), "admin-secret".into());
        c.scram.insert(
            ("carol".into(), ScramMechanism::Sha256),
            ScramCredential::from_password(ScramMechanism::Sha256, "carol-pw", b"salt", 4096),
        );
        c
    }

    fn run(token: &[u8]) -> Result<String, SaslError> {
        let mut s = SaslServer::new(Mechanism::Plain);
        let reply = s.evaluate(token, "", &creds())?;
        assert!(reply.is_empty());
        assert!(s.is_complete());
        Ok(s.authorization_id().unwrap().to_string())
    }

    #[test]
    fn plain_follows_kafka() {
        assert_eq!(run(&plain_token("admin", "admin-secret")).unwrap(), "admin");
        assert_eq!(run(b"admin\0admin\0admin-secret").unwrap(), "admin");
        // SCRAM users can log in with PLAIN too.
        assert_eq!(run(&plain_token("carol", "carol-pw")).unwrap(), "carol");
        assert_eq!(
            run(&plain_token("admin", "nope")),
            Err(SaslError::Authentication(
                "Authentication failed: Invalid username or password".into()
            ))
        );
        assert_eq!(
            run(&plain_token("nobody", "x")),
            Err(SaslError::Authentication(
                "Authentication failed: Invalid username or password".into()
            ))
        );
        assert!(matches!(
            run(b"other\0admin\0admin-secret"),
            Err(SaslError::Authentication(m)) if m.contains("authorization id")
        ));
        assert_eq!(
            run(b"\0admin"),
            Err(SaslError::Credentials(
                "Authentication failed: password not specified".into()
            ))
        );
        assert_eq!(
            run(b""),
            Err(SaslError::Credentials(
                "Authentication failed: username not specified".into()
            ))
        );
        // A NUL inside the password belongs to the password.
        assert!(run(b"\0admin\0admin-secret\0").is_err());
    }

    #[test]
    fn mechanism_names() {
        for m in [
            Mechanism::Plain,
            Mechanism::Scram(ScramMechanism::Sha256),
            Mechanism::Scram(ScramMechanism::Sha512),
        ] {
            assert_eq!(Mechanism::from_name(m.name()), Some(m));
        }
        assert_eq!(Mechanism::from_name("plain"), None);
        assert_eq!(Mechanism::from_name("GSSAPI"), None);
    }
}
