//! TLS for SSL and SASL_SSL listeners, with rustls (ring provider, TLS 1.2 and 1.3 only):
//! Kafka's PEM keystore (`ssl.keystore.location`: the certificate chain and the private key in
//! one file), PEM truststore, `ssl.client.auth` (mTLS), and the principal of a client
//! certificate (its subject in RFC 2253 form through `ssl.principal.mapping.rules`). Everything
//! is loaded when the broker starts; a file or rule that cannot be used stops the start with an
//! error naming its key.

use auth::mapping::SslPrincipalMapper;
use model::security::{ClientAuth, SecurityConfig, TlsListenerConfig};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::collections::BTreeMap;
use std::sync::Arc;

/// How long a client may take to finish the TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT_MS: u64 = 10_000;

/// A TLS listener's acceptor and principal mapping.
pub struct ListenerTls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    mapper: SslPrincipalMapper,
}

impl std::fmt::Debug for ListenerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerTls").finish_non_exhaustive()
    }
}

/// A TLS setting that cannot be used: the key, and why.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct TlsConfigError {
    pub key: String,
    pub reason: String,
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
        .map(|(name, c)| Ok((name.clone(), Arc::new(load(c)?))))
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

/// Builds one listener's TLS server config.
pub fn load(c: &TlsListenerConfig) -> Result<ListenerTls, TlsConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates(&c.keystore_key, &c.keystore_location)?;
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
    let mapper = SslPrincipalMapper::parse(&c.principal_mapping_rules)
        .map_err(|e| err("ssl.principal.mapping.rules", e.to_string()))?;
    Ok(ListenerTls {
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        mapper,
    })
}

impl ListenerTls {
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
