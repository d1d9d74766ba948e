//! The SASL side of one connection, as Kafka's `SaslServerAuthenticator` and `KafkaChannel`
//! run it: which requests are admitted before authentication (ApiVersions once, then
//! SaslHandshake, then SaslAuthenticate, or raw tokens after a v0 handshake), the exchange,
//! the session lifetime from `connections.max.reauth.ms`, re-authentication (same mechanism,
//! same principal, at most once a second) and what a failure is answered with. Sans-IO: the
//! connection decodes requests, hands their parts in, and writes what comes out.

use crate::sasl::{Mechanism, PlainCredentials, SaslError, SaslServer};
use model::ErrorCode;

/// Kafka's API keys this module reasons about.
pub const API_VERSIONS: i16 = 18;
pub const SASL_HANDSHAKE: i16 = 17;
pub const SASL_AUTHENTICATE: i16 = 36;

/// Kafka's `MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS`, in ms.
const MIN_REAUTH_INTERVAL_MS: i64 = 1000;

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    /// Nothing received yet: ApiVersions or SaslHandshake.
    Initial,
    /// After ApiVersions: SaslHandshake only.
    HandshakeRequest,
    /// After a successful handshake: tokens.
    Authenticate,
    /// Re-authentication asked for a different mechanism: the next token fails.
    ReauthBadMechanism(String),
    Complete,
    Failed,
}

/// What to do with a request received while the connection is not authenticated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Serve ApiVersions, then call [`SaslSession::on_api_versions`].
    ApiVersions,
    /// Call [`SaslSession::on_handshake`].
    Handshake,
    /// Call [`SaslSession::on_token`] with the request's auth bytes.
    Authenticate,
    /// Answer the request with its error response carrying ILLEGAL_SASL_STATE, then close
    /// (Kafka: "Unexpected Kafka request of type X during SASL authentication").
    IllegalState,
    /// Close without an answer (Kafka: "Unexpected Kafka request of type X during SASL
    /// handshake", or a second ApiVersions).
    Close,
}

/// The answer to a SaslHandshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandshakeReply {
    pub error: ErrorCode,
    /// The enabled mechanisms, as Kafka lists them in every handshake answer.
    pub mechanisms: Vec<String>,
    /// Close the connection once the answer is written.
    pub close: bool,
}

/// The outcome of one token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenReply {
    /// Send `reply` (in a SaslAuthenticate answer, or raw after a v0 handshake).
    Continue { reply: Vec<u8> },
    /// Authenticated: send `reply` with `session_lifetime_ms`; the connection acts as
    /// `User:<authorization_id>` from now on.
    Complete {
        reply: Vec<u8>,
        authorization_id: String,
        session_lifetime_ms: i64,
    },
    /// Failed: with SaslAuthenticate framing send SASL_AUTHENTICATION_FAILED with `message`
    /// (when `Some`), then close; after a v0 handshake just close.
    Failed {
        message: Option<String>,
        /// For the broker's log only (never sent).
        detail: String,
    },
}

/// The SASL state of one connection.
#[derive(Debug)]
pub struct SaslSession {
    enabled: Vec<Mechanism>,
    /// `connections.max.reauth.ms` (0: sessions never expire).
    max_reauth_ms: i64,
    state: State,
    /// SaslAuthenticate framing (handshake v1+) rather than raw tokens.
    headers: bool,
    server: Option<SaslServer>,
    /// The mechanism and user of the last completed authentication.
    authenticated: Option<(Mechanism, String)>,
    reauthenticating: bool,
    last_reauth_start_ms: Option<i64>,
    session_expires_ms: Option<i64>,
    /// The client used SaslAuthenticate v1+ at least once (KIP-368).
    client_supports_reauth: bool,
}

impl SaslSession {
    pub fn new(enabled: Vec<Mechanism>, max_reauth_ms: i64) -> SaslSession {
        SaslSession {
            enabled,
            max_reauth_ms,
            state: State::Initial,
            headers: false,
            server: None,
            authenticated: None,
            reauthenticating: false,
            last_reauth_start_ms: None,
            session_expires_ms: None,
            client_supports_reauth: false,
        }
    }

    pub fn is_authenticated(&self) -> bool {
        self.state == State::Complete
    }

    /// The next frame is a raw SASL token (after a v0 handshake), not a Kafka request.
    pub fn expects_raw_token(&self) -> bool {
        !self.headers
            && matches!(
                self.state,
                State::Authenticate | State::ReauthBadMechanism(_)
            )
    }

    /// The authenticated user, once authenticated.
    pub fn authorization_id(&self) -> Option<&str> {
        self.authenticated.as_ref().map(|(_, u)| u.as_str())
    }

    pub fn mechanism(&self) -> Option<Mechanism> {
        self.authenticated.as_ref().map(|(m, _)| *m)
    }

    pub fn client_supports_reauth(&self) -> bool {
        self.client_supports_reauth
    }

    /// Kafka's `serverAuthenticationSessionExpired`: past the session lifetime, every
    /// request but a re-authentication handshake closes the connection.
    pub fn session_expired(&self, now_ms: i64) -> bool {
        self.state == State::Complete && self.session_expires_ms.is_some_and(|t| now_ms > t)
    }

    /// Decides a request received while not authenticated (or re-authenticating).
    pub fn admit(&self, api_key: i16) -> Admission {
        match &self.state {
            State::Initial => match api_key {
                API_VERSIONS => Admission::ApiVersions,
                SASL_HANDSHAKE => Admission::Handshake,
                _ => Admission::Close,
            },
            State::HandshakeRequest => match api_key {
                SASL_HANDSHAKE => Admission::Handshake,
                _ => Admission::Close,
            },
            State::Authenticate | State::ReauthBadMechanism(_) => match api_key {
                SASL_AUTHENTICATE => Admission::Authenticate,
                _ => Admission::IllegalState,
            },
            State::Complete | State::Failed => Admission::Close,
        }
    }

    /// ApiVersions was answered.
    pub fn on_api_versions(&mut self) {
        if self.state == State::Initial {
            self.state = State::HandshakeRequest;
        }
    }

    /// A SaslHandshake arrived after authentication: starts re-authentication when the
    /// session has a lifetime and the last re-authentication began a second ago or more.
    /// When this returns false, the handshake is an ordinary request (Kafka answers
    /// ILLEGAL_SASL_STATE).
    pub fn begin_reauthentication(&mut self, now_ms: i64) -> bool {
        if self.state != State::Complete || self.session_expires_ms.is_none() {
            return false;
        }
        if self
            .last_reauth_start_ms
            .is_some_and(|t| now_ms - t < MIN_REAUTH_INTERVAL_MS)
        {
            return false;
        }
        self.last_reauth_start_ms = Some(now_ms);
        self.reauthenticating = true;
        self.state = State::Initial;
        true
    }

    /// Handles a SaslHandshake (`version` is the request's version).
    pub fn on_handshake(&mut self, version: i16, mechanism: &str) -> HandshakeReply {
        let mechanisms: Vec<String> = self.enabled.iter().map(|m| m.name().to_string()).collect();
        if version >= 1 {
            self.headers = true;
        }
        let chosen = Mechanism::from_name(mechanism).filter(|m| self.enabled.contains(m));
        let Some(chosen) = chosen else {
            self.state = State::Failed;
            return HandshakeReply {
                error: ErrorCode::UnsupportedSaslMechanism,
                mechanisms,
                close: true,
            };
        };
        match &self.authenticated {
            Some((previous, _)) if self.reauthenticating && *previous != chosen => {
                self.state = State::ReauthBadMechanism(format!(
                    "SASL mechanism '{}' requested by client is not supported for re-authentication of mechanism '{}'",
                    chosen, previous
                ));
            }
            _ => {
                self.server = Some(SaslServer::new(chosen));
                self.state = State::Authenticate;
            }
        }
        HandshakeReply {
            error: ErrorCode::None,
            mechanisms,
            close: false,
        }
    }

    /// Handles one token: SaslAuthenticate's auth bytes (`authenticate_version` is the
    /// request's version) or a raw token (`None`).
    pub fn on_token(
        &mut self,
        token: &[u8],
        authenticate_version: Option<i16>,
        server_nonce: &str,
        credentials: &dyn PlainCredentials,
        now_ms: i64,
    ) -> TokenReply {
        if authenticate_version.is_some_and(|v| v > 0) {
            self.client_supports_reauth = true;
        }
        let what = if self.reauthenticating {
            "re-authentication"
        } else {
            "authentication"
        };
        if let State::ReauthBadMechanism(message) = &self.state {
            let detail = message.clone();
            self.state = State::Failed;
            // Kafka throws before building an answer: the connection just closes.
            return TokenReply::Failed {
                message: None,
                detail,
            };
        }
        let Some(server) = self
            .server
            .as_mut()
            .filter(|_| self.state == State::Authenticate)
        else {
            self.state = State::Failed;
            return TokenReply::Failed {
                message: None,
                detail: "token outside an exchange".into(),
            };
        };
        let mechanism = server.mechanism();
        let result = server.evaluate(token, server_nonce, credentials);
        let reply = match result {
            Ok(reply) => reply,
            Err(e) => {
                self.state = State::Failed;
                let message = match (&e, self.headers) {
                    (_, false) | (SaslError::Malformed(_), _) => None,
                    (SaslError::Authentication(m), true) => Some(m.clone()),
                    (SaslError::Credentials(_) | SaslError::IllegalState(_), true) => Some(format!(
                        "Authentication failed during {what} due to invalid credentials with SASL mechanism {mechanism}"
                    )),
                };
                return TokenReply::Failed {
                    message,
                    detail: e.to_string(),
                };
            }
        };
        if !server.is_complete() {
            return TokenReply::Continue { reply };
        }
        let user = server.authorization_id().unwrap_or_default().to_string();
        if self.reauthenticating {
            if let Some((_, previous)) = &self.authenticated {
                if *previous != user {
                    self.state = State::Failed;
                    let message = format!(
                        "Cannot change principals during re-authentication from User:{previous}: User:{user}"
                    );
                    return TokenReply::Failed {
                        message: Some(message.clone()).filter(|_| self.headers),
                        detail: message,
                    };
                }
            }
        }
        let lifetime = self.max_reauth_ms.max(0);
        self.session_expires_ms = (lifetime > 0).then(|| now_ms.saturating_add(lifetime));
        self.authenticated = Some((mechanism, user.clone()));
        self.reauthenticating = false;
        self.server = None;
        self.state = State::Complete;
        TokenReply::Complete {
            reply,
            authorization_id: user,
            session_lifetime_ms: lifetime,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::sasl::{plain_token, CredentialSet};
    use crate::scram::{ScramClient, ScramCredential, ScramMechanism};

    fn creds() -> CredentialSet {
        let mut c = CredentialSet::default();
        c.plain_users.insert("alice".into(), "pw".into());
        c.plain_users.insert("bob".into(), "pw".into());
        c.scram.insert(
            ("alice".into(), ScramMechanism::Sha512),
            ScramCredential::from_password(ScramMechanism::Sha512, "pw", b"salt", 4096),
        );
        c
    }

    fn session(reauth_ms: i64) -> SaslSession {
        SaslSession::new(
            vec![Mechanism::Plain, Mechanism::Scram(ScramMechanism::Sha512)],
            reauth_ms,
        )
    }

    #[test]
    fn only_versions_and_sasl_before_authentication() {
        let mut s = session(0);
        assert_eq!(s.admit(3), Admission::Close);
        assert_eq!(s.admit(API_VERSIONS), Admission::ApiVersions);
        s.on_api_versions();
        assert_eq!(s.admit(API_VERSIONS), Admission::Close);
        assert_eq!(s.admit(SASL_HANDSHAKE), Admission::Handshake);
        let r = s.on_handshake(1, "PLAIN");
        assert_eq!(r.error, ErrorCode::None);
        assert_eq!(r.mechanisms, vec!["PLAIN", "SCRAM-SHA-512"]);
        assert_eq!(s.admit(0), Admission::IllegalState);
        assert_eq!(s.admit(SASL_AUTHENTICATE), Admission::Authenticate);
        let c = creds();
        let r = s.on_token(&plain_token("alice", "pw"), Some(2), "", &c, 0);
        assert!(
            matches!(r, TokenReply::Complete { ref authorization_id, session_lifetime_ms: 0, .. } if authorization_id == "alice")
        );
        assert!(s.is_authenticated());
        assert!(!s.session_expired(i64::MAX));
    }

    #[test]
    fn unsupported_mechanism_answers_then_closes() {
        let mut s = session(0);
        let r = s.on_handshake(1, "SCRAM-SHA-256");
        assert_eq!(r.error, ErrorCode::UnsupportedSaslMechanism);
        assert!(r.close);
        assert_eq!(s.admit(SASL_HANDSHAKE), Admission::Close);
    }

    #[test]
    fn failures_answer_as_kafka() {
        let c = creds();
        // Wrong PLAIN password: Kafka's own message.
        let mut s = session(0);
        s.on_handshake(1, "PLAIN");
        let r = s.on_token(&plain_token("alice", "x"), Some(1), "", &c, 0);
        assert_eq!(
            r,
            TokenReply::Failed {
                message: Some("Authentication failed: Invalid username or password".into()),
                detail: "Authentication failed: Invalid username or password".into()
            }
        );
        // Unknown SCRAM user: the generic message.
        let mut s = session(0);
        s.on_handshake(1, "SCRAM-SHA-512");
        let r = s.on_token(b"n,,n=nobody,r=abc", Some(1), "n", &c, 0);
        assert!(matches!(r, TokenReply::Failed { message: Some(ref m), .. }
            if m == "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"));
        // v0 handshake: raw tokens, and a failure just closes.
        let mut s = session(0);
        s.on_handshake(0, "PLAIN");
        assert!(s.expects_raw_token());
        let r = s.on_token(&plain_token("alice", "x"), None, "", &c, 0);
        assert!(matches!(r, TokenReply::Failed { message: None, .. }));
    }

    #[test]
    fn scram_over_the_session_and_reauthentication() {
        let c = creds();
        let mut s = session(60_000);
        s.on_handshake(1, "SCRAM-SHA-512");
        let mut client = ScramClient::new(ScramMechanism::Sha512, "alice", "pw", "cn");
        let TokenReply::Continue { reply } =
            s.on_token(&client.client_first(), Some(2), "sn", &c, 0)
        else {
            panic!("expected server-first")
        };
        let fin = client.client_final(&reply).unwrap();
        let TokenReply::Complete {
            reply,
            session_lifetime_ms,
            ..
        } = s.on_token(&fin, Some(2), "", &c, 1_000)
        else {
            panic!("expected completion")
        };
        client.verify_server_final(&reply).unwrap();
        assert_eq!(session_lifetime_ms, 60_000);
        assert!(!s.session_expired(61_000));
        assert!(s.session_expired(61_001));
        assert!(s.client_supports_reauth());

        // Re-authentication with the same mechanism and user extends the session.
        assert!(s.begin_reauthentication(50_000));
        s.on_handshake(1, "SCRAM-SHA-512");
        let mut client = ScramClient::new(ScramMechanism::Sha512, "alice", "pw", "cn2");
        let TokenReply::Continue { reply } =
            s.on_token(&client.client_first(), Some(2), "sn2", &c, 50_000)
        else {
            panic!()
        };
        let fin = client.client_final(&reply).unwrap();
        assert!(matches!(
            s.on_token(&fin, Some(2), "", &c, 50_100),
            TokenReply::Complete { .. }
        ));
        assert!(!s.session_expired(100_000));
        // Not twice within a second.
        assert!(!s.begin_reauthentication(50_500));

        // A different mechanism on re-authentication: the handshake succeeds, the token
        // closes the connection without an answer.
        assert!(s.begin_reauthentication(60_000));
        assert_eq!(s.on_handshake(1, "PLAIN").error, ErrorCode::None);
        assert!(matches!(
            s.on_token(&plain_token("alice", "pw"), Some(2), "", &c, 60_000),
            TokenReply::Failed { message: None, .. }
        ));
    }

    #[test]
    fn reauthentication_cannot_change_the_principal() {
        let c = creds();
        let mut s = session(10_000);
        s.on_handshake(1, "PLAIN");
        s.on_token(&plain_token("alice", "pw"), Some(2), "", &c, 0);
        assert!(s.begin_reauthentication(5_000));
        s.on_handshake(1, "PLAIN");
        let r = s.on_token(&plain_token("bob", "pw"), Some(2), "", &c, 5_000);
        assert!(matches!(r, TokenReply::Failed { message: Some(ref m), .. }
            if m == "Cannot change principals during re-authentication from User:alice: User:bob"));
    }

    #[test]
    fn no_reauthentication_without_a_lifetime() {
        let c = creds();
        let mut s = session(0);
        s.on_handshake(1, "PLAIN");
        s.on_token(&plain_token("alice", "pw"), Some(2), "", &c, 0);
        assert!(!s.begin_reauthentication(10_000));
    }
}
