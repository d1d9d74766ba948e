//! Client-side security for every connection: TLS with rustls (PEM truststore and keystore,
//! TLS 1.2/1.3, hostname verification as Kafka's `ssl.endpoint.identification.algorithm`)
//! and SASL (PLAIN, SCRAM-SHA-256/512) after the ApiVersions exchange, configured with
//! Kafka's client property names (the Java client's and librdkafka's spellings both work), so
//! one client properties file serves `moldau`, `kafka-*.sh --command-config` and librdkafka.

use std::collections::BTreeMap;
use std::sync::Arc;

use model::cluster::SecurityProtocol;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use crate::error::Error;

/// How a client secures its connections. The default is PLAINTEXT (no TLS, no SASL).
#[derive(Clone, Default)]
pub struct Security {
    /// TLS settings; `Some` for SSL and SASL_SSL.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// SASL credentials; `Some` for SASL_PLAINTEXT and SASL_SSL.
    pub sasl: Option<SaslCredentials>,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security")
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.sasl)
            .finish()
    }
}

/// A SASL mechanism and the user it authenticates as.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslCredentials {
    /// Kafka's mechanism name: `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub mechanism: String,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for SaslCredentials {
    /// The password stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslCredentials")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// The TLS files and checks of a client, as Kafka names them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM CA certificates the server's certificate must chain to (`ssl.truststore.location`
    /// with `ssl.truststore.type=PEM`; librdkafka: `ssl.ca.location`).
    pub truststore_location: String,
    /// A PEM file with this client's certificate chain and private key, for servers that
    /// verify clients (`ssl.keystore.location` with `ssl.keystore.type=PEM`).
    pub keystore_location: Option<String>,
    /// A separate PEM private key (librdkafka's `ssl.key.location` beside
    /// `ssl.certificate.location`); None = the key is in the keystore file.
    pub key_location: Option<String>,
    /// Whether the server's certificate must name the host dialled (Kafka's default
    /// `ssl.endpoint.identification.algorithm=https`; empty or `none` turns it off).
    pub verify_hostname: bool,
}

fn config_error(key: &str, reason: impl std::fmt::Display) -> Error {
    Error::Config(format!("{key}: {reason}"))
}

fn certificates(key: &str, path: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| config_error(key, format!("read {path}: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| config_error(key, format!("{path}: {e}")))?;
    if certs.is_empty() {
        return Err(config_error(
            key,
            format!("{path} holds no PEM CERTIFICATE"),
        ));
    }
    Ok(certs)
}

impl TlsSettings {
    /// Reads the files and builds the rustls client config (TLS 1.2 and 1.3, ring).
    pub fn build(&self) -> Result<Arc<rustls::ClientConfig>, Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        let trust_key = "ssl.truststore.location";
        for cert in certificates(trust_key, &self.truststore_location)? {
            roots.add(cert).map_err(|e| {
                config_error(trust_key, format!("{}: {e}", self.truststore_location))
            })?;
        }
        let verifier =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| config_error(trust_key, e))?;
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| config_error("ssl.enabled.protocols", e))?;
        let builder = if self.verify_hostname {
            builder.with_webpki_verifier(verifier)
        } else {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly(verifier)))
        };
        let config = match &self.keystore_location {
            None => builder.with_no_client_auth(),
            Some(keystore) => {
                let key_key = "ssl.keystore.location";
                let chain = certificates(key_key, keystore)?;
                let key_file = self.key_location.as_deref().unwrap_or(keystore);
                let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| {
                    config_error(
                        key_key,
                        format!("{key_file}: no usable PEM private key: {e}"),
                    )
                })?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| config_error(key_key, e))?
            }
        };
        Ok(Arc::new(config))
    }
}

/// Verifies the server's chain and signatures but not that it names the host dialled (Kafka's
/// `ssl.endpoint.identification.algorithm=` empty).
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The SASL mechanisms this client speaks.
const MECHANISMS: &[&str] = &["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

impl Security {
    /// The security of a client properties file (`--command-config`): `security.protocol`,
    /// `sasl.mechanism` (or `sasl.mechanisms`), the user from `sasl.jaas.config`'s `username`
    /// and `password` options (or `sasl.username` / `sasl.password`), and the TLS files from
    /// `ssl.truststore.location` (or `ssl.ca.location`), `ssl.keystore.location` (or
    /// `ssl.certificate.location` with `ssl.key.location`) and
    /// `ssl.endpoint.identification.algorithm`. Stores must be PEM. Unknown keys are left to
    /// the caller.
    pub fn from_properties(props: &BTreeMap<String, String>) -> Result<Security, Error> {
        let get = |keys: &[&str]| -> Option<(String, String)> {
            keys.iter().find_map(|k| {
                props
                    .get(*k)
                    .map(|v| v.trim().to_string())
                    .filter(|v| !v.is_empty())
                    .map(|v| ((*k).to_string(), v))
            })
        };
        let protocol = match get(&["security.protocol"]) {
            None => SecurityProtocol::Plaintext,
            Some((k, v)) => SecurityProtocol::parse(&v).ok_or_else(|| {
                config_error(
                    &k,
                    format!("{v} is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
                )
            })?,
        };
        let tls = matches!(protocol, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl);
        let sasl = matches!(
            protocol,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        );
        let mut security = Security::default();
        if tls {
            for key in ["ssl.truststore.type", "ssl.keystore.type"] {
                if let Some((k, v)) = get(&[key]) {
                    if !v.eq_ignore_ascii_case("PEM") {
                        return Err(config_error(&k, "only PEM stores are supported"));
                    }
                }
            }
            let (_, truststore_location) = get(&["ssl.truststore.location", "ssl.ca.location"])
                .ok_or_else(|| {
                    config_error(
                        "ssl.truststore.location",
                        "a TLS client needs a PEM file of the CA certificates it trusts",
                    )
                })?;
            let verify_hostname = !matches!(
                get(&["ssl.endpoint.identification.algorithm"])
                    .map(|(_, v)| v.to_ascii_lowercase())
                    .as_deref(),
                Some("none")
            ) && props
                .get("ssl.endpoint.identification.algorithm")
                .is_none_or(|v| !v.trim().is_empty());
            let settings = TlsSettings {
                truststore_location,
                keystore_location: get(&["ssl.keystore.location", "ssl.certificate.location"])
                    .map(|(_, v)| v),
                key_location: get(&["ssl.key.location"]).map(|(_, v)| v),
                verify_hostname,
            };
            security.tls = Some(settings.build()?);
        }
        if sasl {
            let (mk, mechanism) = get(&["sasl.mechanism", "sasl.mechanisms"])
                .unwrap_or_else(|| ("sasl.mechanism".into(), "GSSAPI".into()));
            let mechanism = mechanism.to_ascii_uppercase();
            if !MECHANISMS.contains(&mechanism.as_str()) {
                return Err(config_error(
                    &mk,
                    format!(
                        "SASL mechanism {mechanism} is not supported (supported: {})",
                        MECHANISMS.join(", ")
                    ),
                ));
            }
            let (username, password) = match get(&["sasl.jaas.config"]) {
                Some((k, v)) => {
                    let jaas = model::security::parse_jaas(&k, &v)
                        .map_err(|e| Error::Config(e.to_string()))?;
                    let opt = |name: &str| {
                        jaas.options
                            .get(name)
                            .cloned()
                            .ok_or_else(|| config_error(&k, format!("needs a {name} option")))
                    };
                    (opt("username")?, opt("password")?)
                }
                None => {
                    let (_, u) = get(&["sasl.username"]).ok_or_else(|| {
                        config_error("sasl.jaas.config", "a SASL client needs a username and password (sasl.jaas.config, or sasl.username and sasl.password)")
                    })?;
                    let p = props.get("sasl.password").cloned().unwrap_or_default();
                    (u, p)
                }
            };
            security.sasl = Some(SaslCredentials {
                mechanism,
                username,
                password,
            });
        }
        Ok(security)
    }
}

/// The client side of one SASL exchange, for the connection to drive with SaslAuthenticate.
pub(crate) enum SaslClient {
    Plain(Option<Vec<u8>>),
    Scram(auth::scram::ScramClient, u8),
}

impl SaslClient {
    pub(crate) fn new(c: &SaslCredentials) -> Result<SaslClient, Error> {
        if c.mechanism == "PLAIN" {
            let mut token = Vec::with_capacity(c.username.len() + c.password.len() + 2);
            token.push(0);
            token.extend_from_slice(c.username.as_bytes());
            token.push(0);
            token.extend_from_slice(c.password.as_bytes());
            return Ok(SaslClient::Plain(Some(token)));
        }
        let mechanism = auth::scram::ScramMechanism::from_name(&c.mechanism)
            .ok_or_else(|| Error::Config(format!("unsupported SASL mechanism {}", c.mechanism)))?;
        let mut random = [0u8; 16];
        rustls::crypto::ring::default_provider()
            .secure_random
            .fill(&mut random)
            .map_err(|_| Error::Config("no secure random source for the SCRAM nonce".into()))?;
        let nonce = auth::scram::nonce_from_random(u128::from_le_bytes(random));
        Ok(SaslClient::Scram(
            auth::scram::ScramClient::new(mechanism, &c.username, &c.password, &nonce),
            0,
        ))
    }

    /// The next token to send given the server's last answer (`None` before the first), or
    /// `None` once the exchange is complete.
    pub(crate) fn step(&mut self, server: Option<&[u8]>) -> Result<Option<Vec<u8>>, Error> {
        let fail = |e: auth::sasl::SaslError| {
            Error::broker(
                model::ErrorCode::SaslAuthenticationFailed,
                Some(e.to_string()),
            )
        };
        match self {
            SaslClient::Plain(token) => Ok(token.take()),
            SaslClient::Scram(client, step) => {
                *step += 1;
                match (*step, server) {
                    (1, _) => Ok(Some(client.client_first())),
                    (2, Some(first)) => client.client_final(first).map(Some).map_err(fail),
                    (3, Some(last)) => client.verify_server_final(last).map(|_| None).map_err(fail),
                    _ => Ok(None),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn props(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn properties_name_protocol_mechanism_and_user() {
        let s = Security::from_properties(&props(&[])).unwrap();
        assert!(s.tls.is_none() && s.sasl.is_none());
        let s = Security::from_properties(&props(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            (
                "sasl.jaas.config",
                r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="a\"b";"#,
            ),
        ]))
        .unwrap();
        let c = s.sasl.unwrap();
        assert_eq!(
            (
                c.mechanism.as_str(),
                c.username.as_str(),
                c.password.as_str()
            ),
            ("SCRAM-SHA-512", "alice", "a\"b")
        );
        let s = Security::from_properties(&props(&[
            ("security.protocol", "sasl_plaintext"),
            ("sasl.mechanisms", "PLAIN"),
            ("sasl.username", "bob"),
            ("sasl.password", "pw"),
        ]))
        .unwrap();
        assert_eq!(s.sasl.unwrap().username, "bob");
    }

    #[test]
    fn unusable_properties_name_their_key() {
        for (kv, key) in [
            (vec![("security.protocol", "KERBEROS")], "security.protocol"),
            (
                vec![
                    ("security.protocol", "SASL_PLAINTEXT"),
                    ("sasl.username", "u"),
                ],
                "sasl.mechanism",
            ),
            (
                vec![
                    ("security.protocol", "SASL_PLAINTEXT"),
                    ("sasl.mechanism", "PLAIN"),
                ],
                "sasl.jaas.config",
            ),
            (
                vec![("security.protocol", "SSL")],
                "ssl.truststore.location",
            ),
            (
                vec![
                    ("security.protocol", "SSL"),
                    ("ssl.truststore.location", "/nonexistent/ca.pem"),
                ],
                "ssl.truststore.location",
            ),
            (
                vec![("security.protocol", "SSL"), ("ssl.truststore.type", "JKS")],
                "ssl.truststore.type",
            ),
        ] {
            let e = Security::from_properties(&props(&kv))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{kv:?}: {e}");
        }
    }

    #[test]
    fn plain_sends_one_token() {
        let mut c = SaslClient::new(&SaslCredentials {
            mechanism: "PLAIN".into(),
            username: "u".into(),
            password: "p".into(),
        })
        .unwrap();
        assert_eq!(c.step(None).unwrap().unwrap(), b"\0u\0p");
        assert!(c.step(Some(b"")).unwrap().is_none());
    }
}
