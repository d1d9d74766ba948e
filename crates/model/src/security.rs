//! The security keys of a broker, as Kafka names them: which SASL mechanisms each listener
//! enables (`sasl.enabled.mechanisms`, or `listener.name.<listener>.sasl.enabled.mechanisms`),
//! the PLAIN users of a listener's JAAS config
//! (`listener.name.<listener>.plain.sasl.jaas.config` with `user_<name>="<password>"`
//! entries), the session lifetime (`connections.max.reauth.ms`) and the largest SASL token
//! (`sasl.server.max.receive.size`). Parsed and checked at startup, so a listener that cannot
//! be secured as configured is an error naming the key, never a plaintext listener.

use crate::cluster::{Listener, SecurityProtocol};
use crate::config::ConfigError;
use std::collections::BTreeMap;
use std::fmt;

/// The SASL mechanisms Moldau serves (Kafka's names).
pub const SUPPORTED_MECHANISMS: &[&str] = &["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

/// Security keys that may also be set per listener with the `listener.name.<listener>.`
/// prefix (the mechanism-prefixed JAAS keys are checked separately).
const LISTENER_KEYS: &[&str] = &[
    "sasl.enabled.mechanisms",
    "connections.max.reauth.ms",
    "sasl.server.max.receive.size",
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.client.auth",
    "ssl.principal.mapping.rules",
    "ssl.enabled.protocols",
    "ssl.endpoint.identification.algorithm",
    "ssl.allow.dn.changes",
    "ssl.allow.san.changes",
];

/// The TLS keys a listener's certificate can be changed with at runtime, as Kafka reloads a
/// keystore: `listener.name.<listener>.<key>` set on one broker by IncrementalAlterConfigs (the
/// same path set again reloads the file when it changed). New connections get the new
/// certificate; open ones keep theirs.
pub const DYNAMIC_TLS_KEYS: &[&str] = &["ssl.keystore.location", "ssl.truststore.location"];

/// The listener (as written, any case) and key of a dynamic TLS key
/// (`listener.name.<listener>.ssl.keystore.location`), `None` for any other key.
pub fn dynamic_tls_key(key: &str) -> Option<(&str, &str)> {
    let rest = key.strip_prefix("listener.name.")?;
    let (listener, suffix) = rest.split_once('.')?;
    (!listener.is_empty() && DYNAMIC_TLS_KEYS.contains(&suffix)).then_some((listener, suffix))
}

/// `ssl.client.auth`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Requested,
    Required,
}

/// The TLS settings of one listener whose protocol is SSL or SASL_SSL. Files are read when the
/// broker starts (a file that cannot be used is a startup error naming its key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsListenerConfig {
    /// `ssl.keystore.location` (`ssl.keystore.type=PEM`): the certificate chain and the
    /// private key, PEM, in one file.
    pub keystore_location: String,
    /// `ssl.truststore.location` (`ssl.truststore.type=PEM`): CA certificates client
    /// certificates are verified against.
    pub truststore_location: Option<String>,
    pub client_auth: ClientAuth,
    /// `ssl.principal.mapping.rules` (DEFAULT: the subject's RFC 2253 form).
    pub principal_mapping_rules: String,
    /// `ssl.enabled.protocols`: TLSv1.2 and/or TLSv1.3.
    pub enabled_protocols: Vec<String>,
    /// `ssl.allow.dn.changes` / `ssl.allow.san.changes` (static, as in Kafka): whether a
    /// keystore reloaded at runtime may change the certificate's subject, or drop one of its
    /// SubjectAltNames.
    pub allow_dn_changes: bool,
    pub allow_san_changes: bool,
    /// The key each setting came from, for startup errors about the files.
    pub keystore_key: String,
    pub truststore_key: String,
}

/// The SASL settings of one listener whose protocol is SASL_PLAINTEXT or SASL_SSL.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslListenerConfig {
    /// Enabled mechanisms, Kafka's names, in configured order.
    pub mechanisms: Vec<String>,
    /// `user_<name>="<password>"` entries of the listener's PLAIN JAAS config.
    pub plain_users: BTreeMap<String, String>,
    /// `connections.max.reauth.ms`: 0 means sessions never expire.
    pub max_reauth_ms: i64,
    /// `sasl.server.max.receive.size`: the largest frame accepted before authentication.
    pub max_receive_bytes: i32,
}

impl fmt::Debug for SaslListenerConfig {
    /// Passwords stay out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaslListenerConfig")
            .field("mechanisms", &self.mechanisms)
            .field("plain_users", &self.plain_users.keys().collect::<Vec<_>>())
            .field("max_reauth_ms", &self.max_reauth_ms)
            .field("max_receive_bytes", &self.max_receive_bytes)
            .finish()
    }
}

/// The security settings of every listener, by listener name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SecurityConfig {
    pub sasl: BTreeMap<String, SaslListenerConfig>,
    pub tls: BTreeMap<String, TlsListenerConfig>,
    /// ACL enforcement, when `authorizer.class.name` names Kafka's StandardAuthorizer.
    pub authorizer: Option<AuthorizerConfig>,
    /// How this node dials other brokers' inter-broker listener (None when the node has no
    /// such listener, e.g. a controller-only node).
    pub inter_broker: Option<PeerClientConfig>,
    /// How this node dials the controller listener (`sasl.mechanism.controller.protocol`):
    /// brokers reaching the active controller, voters reaching each other.
    pub controller: Option<PeerClientConfig>,
}

/// How this node connects, as a client, to a listener of the same name on another node: the
/// listener's protocol, the SASL mechanism and user this node authenticates as (Kafka takes
/// them from `sasl.mechanism.inter.broker.protocol` and the `username`/`password` options of
/// the listener's `listener.name.<listener>.<mechanism>.sasl.jaas.config`) and the listener's
/// own TLS stores (its truststore checks the other node's certificate; its keystore is this
/// node's client certificate).
#[derive(Clone, PartialEq, Eq)]
pub struct PeerClientConfig {
    pub listener: String,
    pub protocol: SecurityProtocol,
    /// Set for SASL_PLAINTEXT and SASL_SSL.
    pub sasl: Option<PeerSasl>,
    /// Set for SSL and SASL_SSL.
    pub tls: Option<PeerTls>,
}

/// The SASL side of a `PeerClientConfig`.
#[derive(Clone, PartialEq, Eq)]
pub struct PeerSasl {
    pub mechanism: String,
    /// None when the listener's JAAS config for the mechanism has no `username`/`password`
    /// (this node then cannot authenticate to its peers; the broker warns at startup).
    pub username: Option<String>,
    pub password: String,
    /// The JAAS key the user comes from, for messages.
    pub jaas_key: String,
}

/// The TLS side of a `PeerClientConfig`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerTls {
    /// None: the listener has no truststore, so this node cannot check its peers'
    /// certificates and cannot dial them (the broker warns at startup).
    pub truststore_location: Option<String>,
    pub keystore_location: String,
    /// `ssl.endpoint.identification.algorithm=https` (Kafka's default).
    pub verify_hostname: bool,
}

impl fmt::Debug for PeerClientConfig {
    /// The password stays out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerClientConfig")
            .field("listener", &self.listener)
            .field("protocol", &self.protocol)
            .field(
                "sasl",
                &self
                    .sasl
                    .as_ref()
                    .map(|s| (s.mechanism.clone(), s.username.clone())),
            )
            .field("tls", &self.tls)
            .finish()
    }
}

/// Kafka's class name of the authorizer Moldau implements (ACLs in the cluster metadata).
pub const STANDARD_AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";

/// The authorizer's static settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// `super.users` as set (`User:a;User:b`).
    pub super_users: String,
    /// `allow.everyone.if.no.acl.found`.
    pub allow_everyone_if_no_acl_found: bool,
}

impl SecurityConfig {
    /// The SASL settings of a listener, when it authenticates with SASL.
    pub fn sasl_listener(&self, listener: &str) -> Option<&SaslListenerConfig> {
        self.sasl.get(listener)
    }

    /// The TLS settings of a listener, when it is encrypted.
    pub fn tls_listener(&self, listener: &str) -> Option<&TlsListenerConfig> {
        self.tls.get(listener)
    }
}

/// Whether `key` is a listener-prefixed security key Moldau understands
/// (`listener.name.<listener>.<key>`, or `listener.name.<listener>.<mechanism>.sasl.jaas.config`).
pub fn is_listener_key(key: &str) -> bool {
    let Some(rest) = key.strip_prefix("listener.name.") else {
        return false;
    };
    let Some((_, suffix)) = rest.split_once('.') else {
        return false;
    };
    if LISTENER_KEYS.contains(&suffix) {
        return true;
    }
    suffix
        .strip_suffix(".sasl.jaas.config")
        .is_some_and(|m| mechanism_name(m).is_some())
}

/// The mechanism a lower-case JAAS key prefix names (`plain`, `scram-sha-256`, ...).
fn mechanism_name(prefix: &str) -> Option<&'static str> {
    SUPPORTED_MECHANISMS
        .iter()
        .copied()
        .find(|m| m.eq_ignore_ascii_case(prefix))
}

/// A listener's value of `key`: `listener.name.<listener>.<key>` (Kafka writes the listener
/// name in lower case; any case is accepted), else the broker-wide `key`; with the key it came
/// from, for error messages.
fn listener_value(
    props: &BTreeMap<String, String>,
    listener: &str,
    key: &str,
    default: &str,
) -> (String, String) {
    let prefixed = format!("listener.name.{}.{key}", listener.to_ascii_lowercase());
    if let Some((k, v)) = props
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(&prefixed))
    {
        return (k.clone(), v.clone());
    }
    let v = props
        .get(key)
        .cloned()
        .unwrap_or_else(|| default.to_string());
    (key.to_string(), v)
}

/// Parses and checks the security keys for `listeners`. Every prefixed key must name a
/// configured listener.
pub fn parse(
    props: &BTreeMap<String, String>,
    listeners: &[Listener],
    inter_broker_listener: &str,
    controller: Option<&Listener>,
) -> Result<SecurityConfig, ConfigError> {
    // A broker-only node does not bind the controller listener but dials it, with that
    // listener's `listener.name.<controller>.*` settings.
    let mut all: Vec<Listener> = listeners.to_vec();
    if let Some(c) = controller {
        if !all.iter().any(|l| l.name == c.name) {
            all.push(c.clone());
        }
    }
    let listeners = &all[..];
    for (k, v) in props {
        if let Some(rest) = k.strip_prefix("listener.name.") {
            let name = rest.split('.').next().unwrap_or_default();
            let Some(listener) = listeners.iter().find(|l| l.name.eq_ignore_ascii_case(name))
            else {
                return Err(ConfigError::new(
                    k,
                    &redact(k, v),
                    format!("names listener {name}, which is not in listeners"),
                ));
            };
            // A TLS key of a listener that does not use TLS would be ignored: refused.
            let tls = matches!(
                listener.security_protocol,
                SecurityProtocol::Ssl | SecurityProtocol::SaslSsl
            );
            if !tls && rest[name.len()..].starts_with(".ssl.") {
                return Err(ConfigError::new(
                    k,
                    &redact(k, v),
                    format!(
                        "listener {name} is {}, which does not use TLS",
                        listener.security_protocol.name()
                    ),
                ));
            }
        }
    }
    let mut config = SecurityConfig {
        authorizer: parse_authorizer(props)?,
        ..SecurityConfig::default()
    };
    for l in listeners {
        if matches!(
            l.security_protocol,
            SecurityProtocol::Ssl | SecurityProtocol::SaslSsl
        ) {
            config
                .tls
                .insert(l.name.clone(), parse_tls(props, &l.name)?);
        }
        if !matches!(
            l.security_protocol,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        ) {
            continue;
        }
        let (key, raw) = listener_value(props, &l.name, "sasl.enabled.mechanisms", "GSSAPI");
        let mut mechanisms = Vec::new();
        for m in raw.split(',').map(str::trim).filter(|m| !m.is_empty()) {
            let Some(name) = SUPPORTED_MECHANISMS.iter().find(|s| **s == m) else {
                return Err(ConfigError::new(
                    &key,
                    &raw,
                    format!(
                        "SASL mechanism {m} of listener {} is not supported (supported: {})",
                        l.name,
                        SUPPORTED_MECHANISMS.join(", ")
                    ),
                ));
            };
            if !mechanisms.iter().any(|x: &String| x == name) {
                mechanisms.push(name.to_string());
            }
        }
        if mechanisms.is_empty() {
            return Err(ConfigError::new(
                &key,
                &raw,
                format!("listener {} uses SASL but enables no mechanism", l.name),
            ));
        }
        let (key, raw) = listener_value(props, &l.name, "connections.max.reauth.ms", "0");
        let max_reauth_ms = raw
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|v| *v >= 0)
            .ok_or_else(|| ConfigError::new(&key, &raw, "expected a non-negative number"))?;
        let (key, raw) = listener_value(props, &l.name, "sasl.server.max.receive.size", "524288");
        let max_receive_bytes = raw
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|v| *v >= 1)
            .ok_or_else(|| ConfigError::new(&key, &raw, "expected a positive number"))?;
        let mut plain_users = BTreeMap::new();
        let jaas_key = format!(
            "listener.name.{}.plain.sasl.jaas.config",
            l.name.to_ascii_lowercase()
        );
        if let Some((k, v)) = props
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(&jaas_key))
        {
            let jaas = parse_jaas(k, v)?;
            if !jaas.login_module.ends_with("PlainLoginModule") {
                return Err(ConfigError::new(
                    k,
                    &redact(k, v),
                    format!("expected PlainLoginModule, not {}", jaas.login_module),
                ));
            }
            for (option, value) in jaas.options {
                if let Some(user) = option.strip_prefix("user_") {
                    plain_users.insert(user.to_string(), value);
                }
            }
        }
        for (k, v) in props {
            let Some(rest) = k
                .to_ascii_lowercase()
                .strip_prefix(&format!("listener.name.{}.", l.name.to_ascii_lowercase()))
                .and_then(|r| r.strip_suffix(".sasl.jaas.config"))
                .map(str::to_string)
            else {
                continue;
            };
            // The login module of another mechanism configures this broker as a client of
            // that mechanism (inter-broker); its syntax is still checked.
            parse_jaas(k, v)?;
            if mechanism_name(&rest).is_none() {
                return Err(ConfigError::new(k, "[hidden]", "unknown SASL mechanism"));
            }
        }
        config.sasl.insert(
            l.name.clone(),
            SaslListenerConfig {
                mechanisms,
                plain_users,
                max_reauth_ms,
                max_receive_bytes,
            },
        );
    }
    if let Some(l) = listeners.iter().find(|l| l.name == inter_broker_listener) {
        config.inter_broker = Some(peer_client(
            props,
            &config,
            l,
            "sasl.mechanism.inter.broker.protocol",
        )?);
    }
    if let Some(c) = controller {
        config.controller = Some(peer_client(
            props,
            &config,
            c,
            "sasl.mechanism.controller.protocol",
        )?);
    }
    Ok(config)
}

/// How this node dials listener `l` of its peers; `mechanism_key` names the SASL mechanism
/// (`sasl.mechanism.inter.broker.protocol` or `sasl.mechanism.controller.protocol`).
fn peer_client(
    props: &BTreeMap<String, String>,
    config: &SecurityConfig,
    l: &Listener,
    mechanism_key: &str,
) -> Result<PeerClientConfig, ConfigError> {
    let sasl = match config.sasl.get(&l.name) {
        None => None,
        Some(listener_sasl) => {
            let mechanism = match props.get(mechanism_key).map(|m| m.trim()) {
                None | Some("") => listener_sasl.mechanisms[0].clone(),
                Some(m) => {
                    if !listener_sasl.mechanisms.iter().any(|x| x == m) {
                        return Err(ConfigError::new(
                            mechanism_key,
                            m,
                            format!(
                                "must be one of the mechanisms listener {} enables ({})",
                                l.name,
                                listener_sasl.mechanisms.join(", ")
                            ),
                        ));
                    }
                    m.to_string()
                }
            };
            let jaas_key = format!(
                "listener.name.{}.{}.sasl.jaas.config",
                l.name.to_ascii_lowercase(),
                mechanism.to_ascii_lowercase()
            );
            let mut username = None;
            let mut password = String::new();
            if let Some((k, v)) = props
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(&jaas_key))
            {
                let jaas = parse_jaas(k, v)?;
                username = jaas.options.get("username").cloned();
                password = jaas.options.get("password").cloned().unwrap_or_default();
            }
            Some(PeerSasl {
                mechanism,
                username,
                password,
                jaas_key,
            })
        }
    };
    let tls = match config.tls.get(&l.name) {
        None => None,
        Some(t) => {
            let truststore_location = t.truststore_location.clone();
            let (_, algorithm) = listener_value(
                props,
                &l.name,
                "ssl.endpoint.identification.algorithm",
                "https",
            );
            let verify_hostname = match algorithm.trim().to_ascii_lowercase().as_str() {
                "https" => true,
                "" | "none" => false,
                other => {
                    return Err(ConfigError::new(
                        "ssl.endpoint.identification.algorithm",
                        other,
                        "expected https or empty",
                    ))
                }
            };
            Some(PeerTls {
                truststore_location,
                keystore_location: t.keystore_location.clone(),
                verify_hostname,
            })
        }
    };
    Ok(PeerClientConfig {
        listener: l.name.clone(),
        protocol: l.security_protocol,
        sasl,
        tls,
    })
}

/// `authorizer.class.name` and the keys that only mean something with it. An authorizer
/// Moldau does not implement stops the start: serving without the ACLs the operator expects
/// would be a silent downgrade.
fn parse_authorizer(
    props: &BTreeMap<String, String>,
) -> Result<Option<AuthorizerConfig>, ConfigError> {
    let key = "authorizer.class.name";
    let class = props.get(key).map(|v| v.trim()).unwrap_or_default();
    let allow_key = "allow.everyone.if.no.acl.found";
    let allow_raw = props.get(allow_key).map(|v| v.trim()).unwrap_or("false");
    let allow_everyone_if_no_acl_found = match allow_raw.to_ascii_lowercase().as_str() {
        "true" => true,
        "false" => false,
        _ => {
            return Err(ConfigError::new(
                allow_key,
                allow_raw,
                "expected true or false",
            ))
        }
    };
    match class {
        "" => Ok(None),
        STANDARD_AUTHORIZER => Ok(Some(AuthorizerConfig {
            super_users: props.get("super.users").cloned().unwrap_or_default(),
            allow_everyone_if_no_acl_found,
        })),
        other => Err(ConfigError::new(
            key,
            other,
            format!("unsupported authorizer (supported: {STANDARD_AUTHORIZER}, or empty for none)"),
        )),
    }
}

/// The TLS keys of one listener.
fn parse_tls(
    props: &BTreeMap<String, String>,
    listener: &str,
) -> Result<TlsListenerConfig, ConfigError> {
    let value = |key: &str, default: &str| listener_value(props, listener, key, default);
    for store in ["ssl.keystore.type", "ssl.truststore.type"] {
        let (key, v) = value(store, "JKS");
        if !v.trim().eq_ignore_ascii_case("PEM") {
            return Err(ConfigError::new(
                &key,
                &v,
                format!("listener {listener}: only PEM stores are supported (set {store}=PEM)"),
            ));
        }
    }
    let (keystore_key, keystore_location) = value("ssl.keystore.location", "");
    if keystore_location.trim().is_empty() {
        return Err(ConfigError::new(
            &keystore_key,
            "",
            format!("listener {listener} uses TLS and needs a PEM file with its certificate chain and private key"),
        ));
    }
    let (key, password) = value("ssl.key.password", "");
    if !password.is_empty() {
        return Err(ConfigError::new(
            &key,
            "[hidden]",
            "encrypted private keys are not supported; store the key unencrypted (PKCS#8) with restricted file permissions",
        ));
    }
    let (truststore_key, truststore) = value("ssl.truststore.location", "");
    let truststore_location = Some(truststore).filter(|t| !t.trim().is_empty());
    let (key, raw) = value("ssl.client.auth", "none");
    let client_auth = match raw.trim().to_ascii_lowercase().as_str() {
        "none" => ClientAuth::None,
        "requested" => ClientAuth::Requested,
        "required" => ClientAuth::Required,
        _ => {
            return Err(ConfigError::new(
                &key,
                &raw,
                "expected required, requested or none",
            ))
        }
    };
    if client_auth != ClientAuth::None && truststore_location.is_none() {
        return Err(ConfigError::new(
            &truststore_key,
            "",
            format!("listener {listener} verifies client certificates (ssl.client.auth={raw}) and needs a PEM truststore"),
        ));
    }
    let (key, raw) = value("ssl.enabled.protocols", "TLSv1.2,TLSv1.3");
    let mut enabled_protocols = Vec::new();
    for p in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if p != "TLSv1.2" && p != "TLSv1.3" {
            return Err(ConfigError::new(
                &key,
                &raw,
                format!("{p} is not supported (TLSv1.2 and TLSv1.3 are)"),
            ));
        }
        enabled_protocols.push(p.to_string());
    }
    if enabled_protocols.is_empty() {
        return Err(ConfigError::new(&key, &raw, "enables no TLS version"));
    }
    let (_, principal_mapping_rules) = value("ssl.principal.mapping.rules", "DEFAULT");
    let flag = |name: &str| -> Result<bool, ConfigError> {
        let (key, raw) = value(name, "false");
        match raw.trim().to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(ConfigError::new(&key, &raw, "expected true or false")),
        }
    };
    let allow_dn_changes = flag("ssl.allow.dn.changes")?;
    let allow_san_changes = flag("ssl.allow.san.changes")?;
    Ok(TlsListenerConfig {
        keystore_location,
        truststore_location,
        client_auth,
        principal_mapping_rules,
        enabled_protocols,
        allow_dn_changes,
        allow_san_changes,
        keystore_key,
        truststore_key,
    })
}

/// A JAAS config value: `<LoginModule class> <flag> key=value ... ;`.
#[derive(Clone, PartialEq, Eq)]
pub struct JaasConfig {
    pub login_module: String,
    pub options: BTreeMap<String, String>,
}

impl fmt::Debug for JaasConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JaasConfig")
            .field("login_module", &self.login_module)
            .field("options", &self.options.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// A JAAS value in error messages: only its login module, never a password.
fn redact(key: &str, value: &str) -> String {
    if key.ends_with("jaas.config") {
        value
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
            + " [hidden]"
    } else {
        value.to_string()
    }
}

/// Splits a JAAS config into tokens: words, `=`, `;` and double-quoted strings (with `\`
/// escapes), as Java's `StreamTokenizer` does for Kafka's `JaasConfig`.
fn jaas_tokens(key: &str, v: &str) -> Result<Vec<(bool, String)>, ConfigError> {
    let err = |reason: &str| ConfigError::new(key, &redact(key, v), reason);
    let mut out = Vec::new();
    let mut chars = v.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '=' || c == ';' {
            chars.next();
            out.push((false, c.to_string()));
        } else if c == '"' {
            chars.next();
            let mut s = String::new();
            loop {
                match chars.next() {
                    None => return Err(err("unterminated quoted value")),
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some(e) => s.push(e),
                        None => return Err(err("unterminated quoted value")),
                    },
                    Some(c) => s.push(c),
                }
            }
            out.push((true, s));
        } else {
            let mut s = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() || c == '=' || c == ';' || c == '"' {
                    break;
                }
                s.push(c);
                chars.next();
            }
            out.push((false, s));
        }
    }
    Ok(out)
}

/// Parses one JAAS login module entry, as Kafka's `sasl.jaas.config` holds it.
pub fn parse_jaas(key: &str, v: &str) -> Result<JaasConfig, ConfigError> {
    let err = |reason: &str| ConfigError::new(key, &redact(key, v), reason);
    let tokens = jaas_tokens(key, v)?;
    let mut it = tokens.into_iter();
    let Some((false, login_module)) = it.next() else {
        return Err(err("expected a login module class"));
    };
    match it.next() {
        Some((false, flag))
            if ["required", "requisite", "sufficient", "optional"]
                .contains(&flag.to_ascii_lowercase().as_str()) => {}
        _ => {
            return Err(err(
                "expected a control flag (required) after the login module",
            ))
        }
    }
    let mut options = BTreeMap::new();
    loop {
        match it.next() {
            Some((false, t)) if t == ";" => break,
            Some((false, name)) if name != "=" => {
                if it.next() != Some((false, "=".to_string())) {
                    return Err(err("expected key=value"));
                }
                let Some((_, value)) = it.next() else {
                    return Err(err("expected a value after ="));
                };
                options.insert(name, value);
            }
            _ => return Err(err("expected key=value entries ending with ;")),
        }
    }
    if it.next().is_some() {
        return Err(err("exactly one login module is allowed"));
    }
    Ok(JaasConfig {
        login_module,
        options,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::cluster::parse_listeners;
    use crate::cluster::parse_protocol_map;
    use crate::cluster::DEFAULT_PROTOCOL_MAP;

    fn props(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn listeners(v: &str) -> Vec<Listener> {
        let map =
            parse_protocol_map(&format!("{DEFAULT_PROTOCOL_MAP},EXTERNAL:SASL_PLAINTEXT")).unwrap();
        parse_listeners("listeners", v, &map).unwrap()
    }

    #[test]
    fn kafka_plain_jaas_config_parses() {
        let j = parse_jaas(
            "k",
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="al\"ice";"#,
        )
        .unwrap();
        assert_eq!(
            j.login_module,
            "org.apache.kafka.common.security.plain.PlainLoginModule"
        );
        assert_eq!(j.options["user_alice"], "al\"ice");
        assert_eq!(j.options["username"], "admin");
        for bad in [
            "",
            "Mod",
            "Mod required user_a=\"x\"",
            "Mod required user_a=;",
            "Mod required user_a=\"x;",
            "Mod maybe a=b;",
            "Mod required a=b; Other required;",
        ] {
            assert!(parse_jaas("k", bad).is_err(), "{bad}");
        }
        // Error messages never carry a password.
        let e = parse_jaas("x.sasl.jaas.config", "Mod required user_a=\"secret\"").unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
    }

    #[test]
    fn sasl_listeners_take_their_mechanisms_and_users() {
        let ls = listeners("PLAINTEXT://h:1,EXTERNAL://h:2");
        let c = parse(
            &props(&[
                ("sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-256"),
                (
                    "listener.name.external.plain.sasl.jaas.config",
                    r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="a1";"#,
                ),
                ("listener.name.external.connections.max.reauth.ms", "5000"),
            ]),
            &ls,
            "",
            None,
        )
        .unwrap();
        assert!(c.sasl_listener("PLAINTEXT").is_none());
        let e = c.sasl_listener("EXTERNAL").unwrap();
        assert_eq!(e.mechanisms, ["PLAIN", "SCRAM-SHA-256"]);
        assert_eq!(e.plain_users["alice"], "a1");
        assert_eq!(e.max_reauth_ms, 5000);
        assert_eq!(e.max_receive_bytes, 524288);
        assert!(!format!("{e:?}").contains("a1"));
    }

    #[test]
    fn tls_listeners_take_kafkas_pem_keys() {
        let map = parse_protocol_map("TLS:SSL,PLAINTEXT:PLAINTEXT").unwrap();
        let ls = parse_listeners("listeners", "TLS://h:1,PLAINTEXT://h:2", &map).unwrap();
        let pem = [
            ("ssl.keystore.type", "PEM"),
            ("ssl.truststore.type", "PEM"),
            ("ssl.keystore.location", "/k.pem"),
        ];
        let c = parse(&props(&pem), &ls, "", None).unwrap();
        let t = c.tls_listener("TLS").unwrap();
        assert_eq!(
            (t.keystore_location.as_str(), t.client_auth),
            ("/k.pem", ClientAuth::None)
        );
        assert!(c.tls_listener("PLAINTEXT").is_none());
        let with = |extra: &[(&str, &str)]| {
            let mut kv = pem.to_vec();
            kv.extend_from_slice(extra);
            parse(&props(&kv), &ls, "", None)
        };
        let e = with(&[("ssl.client.auth", "required")]).unwrap_err();
        assert_eq!(e.key, "ssl.truststore.location");
        let t = with(&[
            ("listener.name.tls.ssl.client.auth", "required"),
            ("ssl.truststore.location", "/ca.pem"),
        ])
        .unwrap();
        assert_eq!(
            t.tls_listener("TLS").unwrap().client_auth,
            ClientAuth::Required
        );
        assert_eq!(
            with(&[("ssl.client.auth", "maybe")]).unwrap_err().key,
            "ssl.client.auth"
        );
        // Kafka's ssl.allow.dn.changes / ssl.allow.san.changes: false unless set, broker-wide
        // or per listener.
        assert!(!t.tls_listener("TLS").unwrap().allow_dn_changes);
        let t = with(&[
            ("ssl.allow.dn.changes", "true"),
            ("listener.name.tls.ssl.allow.san.changes", "TRUE"),
        ])
        .unwrap();
        let t = t.tls_listener("TLS").unwrap();
        assert!(t.allow_dn_changes && t.allow_san_changes);
        assert_eq!(
            with(&[("listener.name.tls.ssl.allow.dn.changes", "yes")])
                .unwrap_err()
                .key,
            "listener.name.tls.ssl.allow.dn.changes"
        );
        assert_eq!(
            with(&[("ssl.enabled.protocols", "TLSv1.1")])
                .unwrap_err()
                .key,
            "ssl.enabled.protocols"
        );
        assert_eq!(
            with(&[("ssl.key.password", "x")]).unwrap_err().key,
            "ssl.key.password"
        );
        let e = parse(&props(&[]), &ls, "", None).unwrap_err();
        assert_eq!(e.key, "ssl.keystore.type");
    }

    #[test]
    fn what_cannot_be_served_is_an_error_naming_the_key() {
        let ls = listeners("EXTERNAL://h:2");
        // Kafka's default mechanism is GSSAPI, which Moldau does not serve.
        let e = parse(&props(&[]), &ls, "", None).unwrap_err();
        assert_eq!(e.key, "sasl.enabled.mechanisms");
        assert!(e.reason.contains("GSSAPI"), "{e}");
        let e = parse(
            &props(&[(
                "listener.name.external.sasl.enabled.mechanisms",
                "OAUTHBEARER",
            )]),
            &ls,
            "",
            None,
        )
        .unwrap_err();
        assert_eq!(e.key, "listener.name.external.sasl.enabled.mechanisms");
        let e = parse(
            &props(&[
                ("sasl.enabled.mechanisms", "PLAIN"),
                ("listener.name.other.sasl.enabled.mechanisms", "PLAIN"),
            ]),
            &ls,
            "",
            None,
        )
        .unwrap_err();
        assert_eq!(e.key, "listener.name.other.sasl.enabled.mechanisms");
        let e = parse(
            &props(&[
                ("sasl.enabled.mechanisms", "PLAIN"),
                (
                    "listener.name.external.plain.sasl.jaas.config",
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;",
                ),
            ]),
            &ls,
            "",
            None,
        )
        .unwrap_err();
        assert!(e.reason.contains("PlainLoginModule"), "{e}");
        assert!(is_listener_key(
            "listener.name.external.scram-sha-256.sasl.jaas.config"
        ));
        assert!(is_listener_key(
            "listener.name.external.sasl.enabled.mechanisms"
        ));
        assert!(!is_listener_key(
            "listener.name.external.gssapi.sasl.jaas.config"
        ));
        assert!(!is_listener_key("listener.name.external.nonsense"));
        assert_eq!(
            dynamic_tls_key("listener.name.SSL.ssl.keystore.location"),
            Some(("SSL", "ssl.keystore.location"))
        );
        assert!(dynamic_tls_key("listener.name.ssl.ssl.client.auth").is_none());
        assert!(dynamic_tls_key("ssl.keystore.location").is_none());
    }
}
