//! TLS for SSL and SASL_SSL listeners, with rustls (ring provider, TLS 1.2 and 1.3 only):
//! Kafka's PEM keystore (`ssl.keystore.location`: the certificate chain and the private key in
//! one file), PEM truststore, `ssl.client.auth` (mTLS), and the principal of a client
//! certificate (its subject in RFC 2253 form through `ssl.principal.mapping.rules`). Everything
//! is loaded when the broker starts; a file or rule that cannot be used stops the start with an
//! error naming its key. The stores are reloaded without a restart, as Kafka reloads a
//! keystore: when the dynamic `listener.name.<listener>.ssl.keystore.location` (or truststore)
//! names another file, or the same file changed; new handshakes use the new certificate.
//! As Kafka's `SslFactory`, a new keystore whose certificate has another subject, or lacks
//! one of the current SubjectAltNames, is refused unless `ssl.allow.dn.changes` /
//! `ssl.allow.san.changes` (static, per listener or broker-wide) allow it.

use auth::mapping::SslPrincipalMapper;
use model::security::{ClientAuth, SecurityConfig, TlsListenerConfig};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

/// How long a client may take to finish the TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT_MS: u64 = 10_000;

/// A TLS listener's acceptor and principal mapping. The acceptor is swapped whole when its
/// stores are reloaded (a handshake in progress keeps the config it started with); the
/// principal mapping and the other settings come from the config file and stay.
pub struct ListenerTls {
    listener: String,
    /// The listener's settings from the config file; the dynamic store locations override.
    base: TlsListenerConfig,
    current: RwLock<Loaded>,
    mapper: SslPrincipalMapper,
}

/// The acceptor in use and what it was loaded from.
struct Loaded {
    acceptor: tokio_rustls::TlsAcceptor,
    stores: Vec<FileStamp>,
    /// The subject and SubjectAltNames of the keystore's certificate.
    identity: auth::dn::CertificateIdentity,
}

/// A store file as last seen: its path, modification time and length (an in-place renewal
/// changes at least one of the two).
#[derive(Clone, Debug, PartialEq, Eq)]
struct FileStamp {
    path: String,
    modified: Option<SystemTime>,
    len: u64,
}

impl FileStamp {
    fn of(path: &str) -> FileStamp {
        let meta = std::fs::metadata(path).ok();
        FileStamp {
            path: path.to_string(),
            modified: meta.as_ref().and_then(|m| m.modified().ok()),
            len: meta.map_or(0, |m| m.len()),
        }
    }

    fn stores(c: &TlsListenerConfig) -> Vec<FileStamp> {
        std::iter::once(&c.keystore_location)
            .chain(c.truststore_location.as_ref())
            .map(|p| FileStamp::of(p))
            .collect()
    }
}

impl std::fmt::Debug for ListenerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerTls")
            .field("listener", &self.listener)
            .finish_non_exhaustive()
    }
}

/// A TLS setting that cannot be used: the key, and why.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct TlsConfigError {
    pub key: String,
    pub reason: String,
}

/// How Kafka's `SslFactory` words a refused reconfiguration (a ConfigException it wraps).
const RECONFIGURATION_REFUSED: &str = "Validation of dynamic config update of SSLFactory failed: org.apache.kafka.common.config.ConfigException: ";

impl TlsConfigError {
    /// The message for the client whose change was refused: Kafka's own where Kafka refuses
    /// the change for the same reason (a certificate that may not replace the current one),
    /// else the key and the reason.
    pub fn client_message(&self) -> String {
        if self.reason.starts_with(RECONFIGURATION_REFUSED) {
            self.reason.clone()
        } else {
            self.to_string()
        }
    }
}

fn err(key: &str, reason: impl Into<String>) -> TlsConfigError {
    TlsConfigError {
        key: key.to_string(),
        reason: reason.into(),
    }
}

/// Loads every TLS listener's certificates, by listener name.
pub fn load_all(
    security: &SecurityConfig,
) -> Result<BTreeMap<String, Arc<ListenerTls>>, TlsConfigError> {
    security
        .tls
        .iter()
        .map(|(name, c)| Ok((name.clone(), Arc::new(ListenerTls::load(name, c)?))))
        .collect()
}

fn certificates(key: &str, path: &str) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(key, format!("read {path}: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(key, format!("{path}: {e}")))?;
    if certs.is_empty() {
        return Err(err(key, format!("{path} holds no PEM CERTIFICATE")));
    }
    Ok(certs)
}

/// Builds one listener's TLS acceptor from its stores, with the identity of its certificate.
fn acceptor(
    c: &TlsListenerConfig,
) -> Result<(tokio_rustls::TlsAcceptor, auth::dn::CertificateIdentity), TlsConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates(&c.keystore_key, &c.keystore_location)?;
    let identity = auth::dn::certificate_identity(&chain[0])
        .map_err(|e| err(&c.keystore_key, format!("{}: {e}", c.keystore_location)))?;
    let key = PrivateKeyDer::from_pem_file(&c.keystore_location).map_err(|e| {
        err(
            &c.keystore_key,
            format!("{}: no usable PEM private key: {e}", c.keystore_location),
        )
    })?;
    let mut versions: Vec<&'static rustls::SupportedProtocolVersion> = Vec::new();
    if c.enabled_protocols.iter().any(|p| p == "TLSv1.3") {
        versions.push(&rustls::version::TLS13);
    }
    if c.enabled_protocols.iter().any(|p| p == "TLSv1.2") {
        versions.push(&rustls::version::TLS12);
    }
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| err("ssl.enabled.protocols", e.to_string()))?;
    let builder = match (c.client_auth, &c.truststore_location) {
        (ClientAuth::None, _) | (_, None) => builder.with_no_client_auth(),
        (auth, Some(trust)) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(&c.truststore_key, trust)? {
                roots
                    .add(cert)
                    .map_err(|e| err(&c.truststore_key, format!("{trust}: {e}")))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if auth == ClientAuth::Requested {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|e| err(&c.truststore_key, e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(chain, key)
        .map_err(|e| err(&c.keystore_key, e.to_string()))?;
    Ok((tokio_rustls::TlsAcceptor::from(Arc::new(config)), identity))
}

impl ListenerTls {
    /// Loads a listener's stores and principal mapping from its configured settings.
    pub fn load(listener: &str, c: &TlsListenerConfig) -> Result<ListenerTls, TlsConfigError> {
        let stores = FileStamp::stores(c);
        let (acceptor, identity) = acceptor(c)?;
        let mapper = SslPrincipalMapper::parse(&c.principal_mapping_rules)
            .map_err(|e| err("ssl.principal.mapping.rules", e.to_string()))?;
        Ok(ListenerTls {
            listener: listener.to_string(),
            base: c.clone(),
            current: RwLock::new(Loaded {
                acceptor,
                stores,
                identity,
            }),
            mapper,
        })
    }

    /// The acceptor for a new connection.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .acceptor
            .clone()
    }

    /// The listener's settings with the dynamic store locations among `props` (the broker's
    /// effective keys, or those a change would make).
    fn effective(&self, props: &BTreeMap<String, String>) -> TlsListenerConfig {
        let mut c = self.base.clone();
        for (k, v) in props {
            match model::security::dynamic_tls_key(k) {
                Some((l, "ssl.keystore.location")) if l.eq_ignore_ascii_case(&self.listener) => {
                    c.keystore_location = v.clone();
                    c.keystore_key = k.clone();
                }
                Some((l, "ssl.truststore.location")) if l.eq_ignore_ascii_case(&self.listener) => {
                    c.truststore_location = Some(v.clone());
                    c.truststore_key = k.clone();
                }
                _ => {}
            }
        }
        c
    }

    /// Checks the stores `props` name can be loaded and their certificate may replace the
    /// current one, loading nothing into the listener (a dynamic change is refused otherwise,
    /// as Kafka validates a reconfiguration).
    pub fn check(&self, props: &BTreeMap<String, String>) -> Result<(), TlsConfigError> {
        let c = self.effective(props);
        let (_, identity) = acceptor(&c)?;
        self.compatible(&c, &identity)
    }

    /// Kafka's `CertificateEntries.ensureCompatible` of a new keystore's certificate with the
    /// current one; the error carries Kafka's message.
    fn compatible(
        &self,
        c: &TlsListenerConfig,
        new: &auth::dn::CertificateIdentity,
    ) -> Result<(), TlsConfigError> {
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        current
            .identity
            .ensure_compatible(new, c.allow_dn_changes, c.allow_san_changes)
            .map_err(|e| TlsConfigError {
                key: c.keystore_key.clone(),
                reason: format!("{RECONFIGURATION_REFUSED}{e}"),
            })
    }

    /// Reloads the stores when `props` name other files than those loaded, or a loaded file
    /// changed since. `Ok(true)` when reloaded; on an error (a store that cannot be used, or,
    /// unless `initial`, a certificate that may not replace the current one) the current
    /// acceptor stays. `initial`: the broker's first configuration, before it serves (Kafka
    /// starts with its dynamic stores and compares nothing).
    pub fn refresh(
        &self,
        props: &BTreeMap<String, String>,
        initial: bool,
    ) -> Result<bool, TlsConfigError> {
        let c = self.effective(props);
        let stores = FileStamp::stores(&c);
        if self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .stores
            == stores
        {
            return Ok(false);
        }
        let (acceptor, identity) = acceptor(&c)?;
        if !initial {
            self.compatible(&c, &identity)?;
        }
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Loaded {
            acceptor,
            stores,
            identity,
        };
        Ok(true)
    }

    /// The principal name of a client certificate (Kafka's `DefaultKafkaPrincipalBuilder`):
    /// the mapped subject, or ANONYMOUS without a certificate.
    pub fn principal(&self, peer_certificates: Option<&[CertificateDer<'_>]>) -> String {
        let Some(cert) = peer_certificates.and_then(|c| c.first()) else {
            return "ANONYMOUS".into();
        };
        match auth::dn::certificate_subject(cert) {
            Ok(dn) => self.mapper.name(&dn).unwrap_or(dn),
            Err(e) => {
                tracing::debug!(error = %e, "client certificate subject unreadable");
                "ANONYMOUS".into()
            }
        }
    }
}
