//! The cluster shape of a node: its listeners (name, host, port, security protocol), its
//! process roles, and the controller quorum's voters, parsed from Kafka's keys
//! (`listeners`, `advertised.listeners`, `listener.security.protocol.map`,
//! `controller.listener.names`, `inter.broker.listener.name`, `process.roles`,
//! `controller.quorum.voters`).

use crate::config::ConfigError;
use std::collections::BTreeMap;

/// A listener's security protocol (Kafka's `listener.security.protocol.map` values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn parse(s: &str) -> Option<SecurityProtocol> {
        match s.trim().to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Some(SecurityProtocol::Plaintext),
            "SSL" => Some(SecurityProtocol::Ssl),
            "SASL_PLAINTEXT" => Some(SecurityProtocol::SaslPlaintext),
            "SASL_SSL" => Some(SecurityProtocol::SaslSsl),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// Kafka's wire id (BrokerRegistration listeners).
    pub fn id(self) -> i16 {
        match self {
            SecurityProtocol::Plaintext => 0,
            SecurityProtocol::Ssl => 1,
            SecurityProtocol::SaslPlaintext => 2,
            SecurityProtocol::SaslSsl => 3,
        }
    }

    pub fn from_id(id: i16) -> Option<SecurityProtocol> {
        match id {
            0 => Some(SecurityProtocol::Plaintext),
            1 => Some(SecurityProtocol::Ssl),
            2 => Some(SecurityProtocol::SaslPlaintext),
            3 => Some(SecurityProtocol::SaslSsl),
            _ => None,
        }
    }
}

/// One named listener: where it binds (or, advertised, where others reach it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub host: String,
    pub port: u16,
    pub security_protocol: SecurityProtocol,
}

impl Listener {
    /// `host:port`.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// What a node runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Roles {
    pub broker: bool,
    pub controller: bool,
}

/// A controller quorum voter from `controller.quorum.voters` (`id@host:port`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Voter {
    pub id: i32,
    pub host: String,
    pub port: u16,
}

impl Voter {
    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// Kafka's default `listener.security.protocol.map`.
pub const DEFAULT_PROTOCOL_MAP: &str =
    "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL";

/// Parses `listener.security.protocol.map` (`NAME:PROTOCOL,...`).
pub fn parse_protocol_map(v: &str) -> Result<BTreeMap<String, SecurityProtocol>, ConfigError> {
    let key = "listener.security.protocol.map";
    let mut map = BTreeMap::new();
    for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, proto) = part
            .split_once(':')
            .ok_or_else(|| ConfigError::new(key, v, format!("{part:?} is not NAME:PROTOCOL")))?;
        let proto = SecurityProtocol::parse(proto).ok_or_else(|| {
            ConfigError::new(key, v, format!("unknown security protocol {proto:?}"))
        })?;
        map.insert(name.trim().to_ascii_uppercase(), proto);
    }
    Ok(map)
}

fn split_host_port<'a>(
    key: &str,
    whole: &str,
    addr: &'a str,
) -> Result<(&'a str, u16), ConfigError> {
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| ConfigError::new(key, whole, format!("{addr:?} is not HOST:PORT")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = port
        .parse::<u16>()
        .map_err(|_| ConfigError::new(key, whole, format!("{addr:?} has no valid port")))?;
    Ok((host, port))
}

/// Parses a listener list (`NAME://host:port,...`; a bare `host:port` is `PLAINTEXT://`).
/// Names must be unique and known to the protocol map.
pub fn parse_listeners(
    key: &str,
    v: &str,
    protocols: &BTreeMap<String, SecurityProtocol>,
) -> Result<Vec<Listener>, ConfigError> {
    let mut out: Vec<Listener> = Vec::new();
    for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, addr) = match part.split_once("://") {
            Some((n, a)) => (n.trim().to_ascii_uppercase(), a),
            None => ("PLAINTEXT".to_string(), part),
        };
        let (host, port) = split_host_port(key, v, addr)?;
        let security_protocol = *protocols.get(&name).ok_or_else(|| {
            ConfigError::new(
                key,
                v,
                format!("listener name {name} is not in listener.security.protocol.map"),
            )
        })?;
        if out.iter().any(|l| l.name == name) {
            return Err(ConfigError::new(
                key,
                v,
                format!("listener name {name} appears twice"),
            ));
        }
        out.push(Listener {
            name,
            host: host.to_string(),
            port,
            security_protocol,
        });
    }
    Ok(out)
}

/// Parses `process.roles`.
pub fn parse_roles(v: &str) -> Result<Roles, ConfigError> {
    let mut roles = Roles {
        broker: false,
        controller: false,
    };
    for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part {
            "broker" => roles.broker = true,
            "controller" => roles.controller = true,
            _ => {
                return Err(ConfigError::new(
                    "process.roles",
                    v,
                    "expected broker, controller, or broker,controller",
                ))
            }
        }
    }
    if !roles.broker && !roles.controller {
        return Err(ConfigError::new("process.roles", v, "names no role"));
    }
    Ok(roles)
}

/// Parses `controller.quorum.voters` (`id@host:port,...`).
pub fn parse_voters(v: &str) -> Result<Vec<Voter>, ConfigError> {
    let key = "controller.quorum.voters";
    let mut out: Vec<Voter> = Vec::new();
    for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('@')
            .ok_or_else(|| ConfigError::new(key, v, format!("{part:?} is not ID@HOST:PORT")))?;
        let id = id
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|i| *i >= 0)
            .ok_or_else(|| ConfigError::new(key, v, format!("{id:?} is not a node id")))?;
        let (host, port) = split_host_port(key, v, addr)?;
        if out.iter().any(|x| x.id == id) {
            return Err(ConfigError::new(
                key,
                v,
                format!("voter {id} appears twice"),
            ));
        }
        out.push(Voter {
            id,
            host: host.to_string(),
            port,
        });
    }
    Ok(out)
}

/// Replaces the address of the first listener that is not a controller listener in a
/// `listeners` value (what `--listen` sets), keeping the others.
pub fn with_client_address(listeners: &str, controller_names: &[String], addr: &str) -> String {
    let mut parts: Vec<String> = listeners
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(String::from)
        .collect();
    let position = parts.iter().position(|p| {
        let name = p
            .split_once("://")
            .map_or("PLAINTEXT".to_string(), |(n, _)| {
                n.trim().to_ascii_uppercase()
            });
        !controller_names.contains(&name)
    });
    let new_addr = addr.split_once("://").map_or(addr, |(_, a)| a);
    match position {
        Some(i) => {
            let name = parts[i]
                .split_once("://")
                .map_or("PLAINTEXT".to_string(), |(n, _)| n.trim().to_string());
            parts[i] = format!("{name}://{new_addr}");
        }
        None => parts.insert(0, format!("PLAINTEXT://{new_addr}")),
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn listeners_parse_with_names_and_protocols() {
        let map = parse_protocol_map(DEFAULT_PROTOCOL_MAP).unwrap();
        let l = parse_listeners(
            "listeners",
            "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
            &map,
        )
        .unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[1].name, "CONTROLLER");
        assert_eq!(l[1].port, 9093);
        let bare = parse_listeners("listeners", "127.0.0.1:0", &map).unwrap();
        assert_eq!(bare[0].name, "PLAINTEXT");
        let ssl = parse_listeners("listeners", "SSL://h:1", &map).unwrap();
        assert_eq!(ssl[0].security_protocol, SecurityProtocol::Ssl);
        assert!(parse_listeners("listeners", "FOO://h:1", &map).is_err());
        assert!(parse_listeners("listeners", "PLAINTEXT://h:1,PLAINTEXT://h:2", &map).is_err());
        assert!(parse_listeners("listeners", "PLAINTEXT://h", &map).is_err());
    }

    #[test]
    fn voters_and_roles() {
        let v = parse_voters("1@a:1,2@b:2").unwrap();
        assert_eq!(v[1].address(), "b:2");
        assert!(parse_voters("1@a:1,1@b:2").is_err());
        assert!(parse_voters("x@a:1").is_err());
        assert_eq!(
            parse_roles("broker,controller").unwrap(),
            Roles {
                broker: true,
                controller: true
            }
        );
        assert!(parse_roles("").is_err());
        assert!(parse_roles("zookeeper").is_err());
    }

    #[test]
    fn listen_flag_replaces_the_client_listener() {
        let c = vec!["CONTROLLER".to_string()];
        assert_eq!(
            with_client_address("CONTROLLER://h:9093,PLAINTEXT://h:9092", &c, "127.0.0.1:0"),
            "CONTROLLER://h:9093,PLAINTEXT://127.0.0.1:0"
        );
        assert_eq!(with_client_address("", &c, "h:1"), "PLAINTEXT://h:1");
        assert_eq!(with_client_address("h:2", &c, "h:1"), "PLAINTEXT://h:1");
    }
}
