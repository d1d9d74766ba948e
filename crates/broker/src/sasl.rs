//! SASL on a connection of a SASL_PLAINTEXT listener: the gate every frame passes before the
//! request is served. It runs `auth::session::SaslSession` (Kafka's `SaslServerAuthenticator`):
//! before authentication only ApiVersions, SaslHandshake and SaslAuthenticate (or raw tokens
//! after a v0 handshake) are admitted and frames are capped at `sasl.server.max.receive.size`;
//! a failure is answered as Kafka answers it and closes the connection; after authentication
//! frames pass through, except a SaslHandshake that starts a re-authentication, and once the
//! session (`connections.max.reauth.ms`) expired, anything else closes the connection.

use auth::sasl::{Mechanism, PlainCredentials};
use auth::scram::{ScramCredential, ScramCredentials, ScramMechanism};
use auth::session::{Admission, SaslSession, TokenReply, SASL_HANDSHAKE};
use bytes::{BufMut, Bytes, BytesMut};
use model::security::SaslListenerConfig;
use model::ErrorCode;
use protocol::messages::{SaslAuthenticateResponse, SaslHandshakeResponse};
use protocol::{ApiKey, RequestKind, ResponseKind, StrBytes};
use std::collections::BTreeMap;
use std::time::Instant;

/// Where SCRAM credentials come from (the cluster metadata).
pub trait ScramStore: Send + Sync {
    fn scram_credential(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential>;
}

/// The credentials one exchange consults: the listener's PLAIN users, then SCRAM credentials.
struct Credentials<'a> {
    plain_users: &'a BTreeMap<String, String>,
    scram: &'a dyn ScramStore,
}

impl ScramCredentials for Credentials<'_> {
    fn scram_credential(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
        self.scram.scram_credential(user, mechanism)
    }
}

impl PlainCredentials for Credentials<'_> {
    fn plain_password(&self, user: &str) -> Option<&str> {
        self.plain_users.get(user).map(String::as_str)
    }
}

/// What the connection does with one frame.
pub enum Step {
    /// Decode and serve this frame as usual.
    Pass(Bytes),
    /// Write this encoded frame (size prefix included); close after it when `close`.
    Answer { frame: Bytes, close: bool },
    /// Close without an answer.
    Close,
}

/// The SASL state of one connection.
pub struct SaslGate {
    session: SaslSession,
    plain_users: BTreeMap<String, String>,
    max_receive_bytes: usize,
    started: Instant,
}

impl SaslGate {
    pub fn new(config: &SaslListenerConfig) -> SaslGate {
        let mechanisms = config
            .mechanisms
            .iter()
            .filter_map(|m| Mechanism::from_name(m))
            .collect();
        SaslGate {
            session: SaslSession::new(mechanisms, config.max_reauth_ms),
            plain_users: config.plain_users.clone(),
            max_receive_bytes: config.max_receive_bytes.max(1) as usize,
            started: Instant::now(),
        }
    }

    fn now_ms(&self) -> i64 {
        i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    /// The authenticated user, once the client authenticated.
    pub fn authorization_id(&self) -> Option<&str> {
        self.session.authorization_id()
    }

    /// The largest frame accepted now: `sasl.server.max.receive.size` until authenticated.
    pub fn frame_limit(&self) -> Option<usize> {
        (!self.session.is_authenticated()).then_some(self.max_receive_bytes)
    }

    /// Decides one frame.
    pub fn step(&mut self, frame: Bytes, scram: &dyn ScramStore) -> Step {
        let now = self.now_ms();
        if self.session.expects_raw_token() {
            return self.raw_token(&frame, scram, now);
        }
        let api_key = match frame.get(..2) {
            Some(b) => i16::from_be_bytes([b[0], b[1]]),
            None => return Step::Close,
        };
        if self.session.is_authenticated() {
            if api_key == SASL_HANDSHAKE && self.session.begin_reauthentication(now) {
                tracing::debug!("re-authentication started");
            } else if self.session.session_expired(now) {
                tracing::info!(
                    "closing connection: SASL session expired without re-authentication"
                );
                return Step::Close;
            } else {
                return Step::Pass(frame);
            }
        }
        match self.session.admit(api_key) {
            Admission::ApiVersions => {
                let version = frame.get(2..4).map(|b| i16::from_be_bytes([b[0], b[1]]));
                if version.is_some_and(|v| protocol::versions::is_supported(ApiKey::ApiVersions, v))
                {
                    self.session.on_api_versions();
                }
                Step::Pass(frame)
            }
            Admission::Handshake | Admission::Authenticate => self.exchange(frame, scram, now),
            Admission::IllegalState | Admission::Close => {
                tracing::info!(
                    api_key,
                    "closing connection: request before SASL authentication completed"
                );
                Step::Close
            }
        }
    }

    /// A SaslHandshake or SaslAuthenticate request.
    fn exchange(&mut self, frame: Bytes, scram: &dyn ScramStore, now: i64) -> Step {
        let req = match protocol::decode_request(frame) {
            Ok(r) => r,
            Err(e) => {
                tracing::info!(error = %e, "closing connection: bad SASL request");
                return Step::Close;
            }
        };
        let (version, correlation_id) = (req.version(), req.correlation_id());
        let encode = |api: ApiKey, body: ResponseKind, close: bool| match protocol::encode_response(
            api,
            version,
            correlation_id,
            &body,
        ) {
            Ok(frame) => Step::Answer { frame, close },
            Err(e) => {
                tracing::error!(error = %e, "SASL response encoding failed");
                Step::Close
            }
        };
        match req.body {
            RequestKind::SaslHandshake(r) => {
                let reply = self.session.on_handshake(version, &r.mechanism);
                if reply.error != ErrorCode::None {
                    tracing::info!(mechanism = %r.mechanism.as_str(), "SASL mechanism not enabled");
                }
                let body = SaslHandshakeResponse::default()
                    .with_error_code(reply.error.code())
                    .with_mechanisms(
                        reply
                            .mechanisms
                            .into_iter()
                            .map(StrBytes::from_string)
                            .collect(),
                    );
                encode(
                    ApiKey::SaslHandshake,
                    ResponseKind::SaslHandshake(body),
                    reply.close,
                )
            }
            RequestKind::SaslAuthenticate(r) => {
                let creds = Credentials {
                    plain_users: &self.plain_users,
                    scram,
                };
                let nonce = auth::scram::nonce_from_random(uuid::Uuid::new_v4().as_u128());
                let out = self
                    .session
                    .on_token(&r.auth_bytes, Some(version), &nonce, &creds, now);
                let body = SaslAuthenticateResponse::default();
                let (body, close) = match out {
                    TokenReply::Continue { reply } => (body.with_auth_bytes(reply.into()), false),
                    TokenReply::Complete {
                        reply,
                        authorization_id,
                        session_lifetime_ms,
                    } => {
                        tracing::debug!(user = %authorization_id, "SASL authentication succeeded");
                        let body = body.with_auth_bytes(reply.into());
                        let body = if version >= 1 {
                            body.with_session_lifetime_ms(session_lifetime_ms)
                        } else {
                            body
                        };
                        (body, false)
                    }
                    TokenReply::Failed { message, detail } => {
                        tracing::info!(%detail, "SASL authentication failed");
                        let Some(message) = message else {
                            return Step::Close;
                        };
                        (
                            body.with_error_code(ErrorCode::SaslAuthenticationFailed.code())
                                .with_error_message(Some(StrBytes::from_string(message))),
                            true,
                        )
                    }
                };
                encode(
                    ApiKey::SaslAuthenticate,
                    ResponseKind::SaslAuthenticate(body),
                    close,
                )
            }
            _ => Step::Close,
        }
    }

    /// A raw token after a v0 handshake; the answer is a raw token too.
    fn raw_token(&mut self, frame: &[u8], scram: &dyn ScramStore, now: i64) -> Step {
        let creds = Credentials {
            plain_users: &self.plain_users,
            scram,
        };
        let nonce = auth::scram::nonce_from_random(uuid::Uuid::new_v4().as_u128());
        let reply = match self.session.on_token(frame, None, &nonce, &creds, now) {
            TokenReply::Continue { reply } | TokenReply::Complete { reply, .. } => reply,
            TokenReply::Failed { detail, .. } => {
                tracing::info!(%detail, "SASL authentication failed");
                return Step::Close;
            }
        };
        let Ok(len) = i32::try_from(reply.len()) else {
            return Step::Close;
        };
        let mut out = BytesMut::with_capacity(4 + reply.len());
        out.put_i32(len);
        out.put_slice(&reply);
        Step::Answer {
            frame: out.freeze(),
            close: false,
        }
    }
}

/// The answer to SaslHandshake / SaslAuthenticate on a connection that does not (or no
/// longer) authenticate: ILLEGAL_SASL_STATE, as Kafka's request handler answers them.
pub fn illegal_state(body: &RequestKind) -> Option<ResponseKind> {
    match body {
        RequestKind::SaslHandshake(_) => Some(ResponseKind::SaslHandshake(
            SaslHandshakeResponse::default().with_error_code(ErrorCode::IllegalSaslState.code()),
        )),
        RequestKind::SaslAuthenticate(_) => Some(ResponseKind::SaslAuthenticate(
            SaslAuthenticateResponse::default()
                .with_error_code(ErrorCode::IllegalSaslState.code())
                .with_error_message(Some(StrBytes::from_static_str(
                    "SaslAuthenticate request received after successful authentication",
                ))),
        )),
        _ => None,
    }
}
