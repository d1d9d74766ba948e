//! Broker config loading: Kafka's defaults, then a TOML file, then `MOLDAU_*` env vars, then
//! `--set key=value`, then the dedicated flags; the last one wins.

use anyhow::{bail, Context};
use model::BrokerConfig;
use std::collections::BTreeMap;
use std::path::Path;

/// Where config values come from, lowest precedence first.
pub struct Sources<'a> {
    pub file: Option<&'a Path>,
    pub env: Vec<(String, String)>,
    pub set: &'a [String],
    pub data_dir: Option<&'a Path>,
    pub listen: Option<&'a str>,
    pub advertise: Option<&'a str>,
}

/// Env vars consumed by flags (or by other tools), not config keys.
const NON_KEY_ENV: &[&str] = &[
    "MOLDAU_DATA_DIR",
    "MOLDAU_LISTEN",
    "MOLDAU_ADVERTISE",
    "MOLDAU_CONFIG",
];

pub fn load(src: &Sources<'_>) -> anyhow::Result<BrokerConfig> {
    let mut props = BTreeMap::new();
    if let Some(path) = src.file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("read config file {}", path.display()))?;
        let table: toml::Table = toml::from_str(&text)
            .with_context(|| format!("parse config file {}", path.display()))?;
        flatten("", &table, &mut props)
            .with_context(|| format!("config file {}", path.display()))?;
    }
    for (k, v) in &src.env {
        let Some(rest) = k.strip_prefix("MOLDAU_") else {
            continue;
        };
        if NON_KEY_ENV.contains(&k.as_str()) {
            continue;
        }
        let key = rest.to_ascii_lowercase().replace('_', ".");
        // Only env vars naming a known key are config; others belong to other tools.
        if model::config::broker_config_def(&key).is_some() {
            props.insert(key, v.clone());
        }
    }
    for kv in src.set {
        let Some((k, v)) = kv.split_once('=') else {
            bail!("--set {kv:?}: expected KEY=VALUE");
        };
        props.insert(k.trim().to_string(), v.trim().to_string());
    }
    if let Some(d) = src.data_dir {
        props.insert("log.dirs".into(), d.display().to_string());
    }
    // `--listen` / `--advertise` set the client listener; controller listeners stay.
    let controller_names: Vec<String> = props
        .get("controller.listener.names")
        .map_or("CONTROLLER", String::as_str)
        .split(',')
        .map(|s| s.trim().to_ascii_uppercase())
        .collect();
    if let Some(l) = src.listen {
        let current = props.get("listeners").cloned().unwrap_or_default();
        let v = model::cluster::with_client_address(&current, &controller_names, l);
        props.insert("listeners".into(), v);
    }
    if let Some(a) = src.advertise {
        let current = props
            .get("advertised.listeners")
            .cloned()
            .unwrap_or_default();
        let v = model::cluster::with_client_address(&current, &controller_names, a);
        props.insert("advertised.listeners".into(), v);
    }
    Ok(BrokerConfig::from_props(props)?)
}

fn flatten(
    prefix: &str,
    table: &toml::Table,
    out: &mut BTreeMap<String, String>,
) -> anyhow::Result<()> {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) => flatten(&key, t, out)?,
            toml::Value::String(s) => {
                out.insert(key, s.clone());
            }
            toml::Value::Integer(i) => {
                out.insert(key, i.to_string());
            }
            toml::Value::Float(f) => {
                out.insert(key, f.to_string());
            }
            toml::Value::Boolean(b) => {
                out.insert(key, b.to_string());
            }
            other => bail!("config '{key}': unsupported value {other}"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_file_env_set_flags() {
        let dir = std::env::temp_dir().join(format!("moldau-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("moldau.toml");
        std::fs::write(
            &file,
            "num.partitions = 2\n[log]\nsegment.bytes = 1048576\nretention.ms = 5\n",
        )
        .unwrap();
        let set = vec!["log.retention.ms=7".to_string()];
        let c = load(&Sources {
            file: Some(&file),
            env: vec![
                ("MOLDAU_NUM_PARTITIONS".into(), "3".into()),
                ("MOLDAU_BIN".into(), "/x".into()),
            ],
            set: &set,
            data_dir: Some(Path::new("/tmp/d")),
            listen: Some("127.0.0.1:0"),
            advertise: None,
        })
        .unwrap();
        assert_eq!(c.num_partitions, 3);
        assert_eq!(c.props["log.segment.bytes"], "1048576");
        assert_eq!(c.props["log.retention.ms"], "7");
        assert_eq!(c.data_dir, "/tmp/d");
        assert_eq!(c.listen, "127.0.0.1:0");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_values_name_the_key() {
        let set = vec!["num.partitions=zero".to_string()];
        let e = load(&Sources {
            file: None,
            env: vec![],
            set: &set,
            data_dir: None,
            listen: None,
            advertise: None,
        })
        .unwrap_err();
        assert!(format!("{e:#}").contains("num.partitions"), "{e:#}");
    }
}
