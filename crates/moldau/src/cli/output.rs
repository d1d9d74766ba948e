//! Output helpers: aligned plain-text tables for people, JSON for scripts.

use std::io::Write;

/// A table printed with columns padded to their widest cell.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn print(&self) -> anyhow::Result<()> {
        let mut widths: Vec<usize> = self.header.iter().map(String::len).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                if i < widths.len() {
                    widths[i] = widths[i].max(c.chars().count());
                }
            }
        }
        let mut out = std::io::stdout().lock();
        let line = |cells: &[String]| -> String {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                if i + 1 == cells.len() {
                    s.push_str(c);
                } else {
                    let pad = widths.get(i).copied().unwrap_or(0);
                    s.push_str(&format!("{c:<pad$}  "));
                }
            }
            s.trim_end().to_owned()
        };
        writeln!(out, "{}", line(&self.header))?;
        for r in &self.rows {
            writeln!(out, "{}", line(r))?;
        }
        Ok(())
    }
}

/// Prints one JSON value on its own line.
pub fn print_json(v: &serde_json::Value) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{v}")?;
    Ok(())
}

/// Bytes as text when they are UTF-8, else lossily.
pub fn text(b: Option<&bytes::Bytes>) -> String {
    match b {
        None => String::new(),
        Some(b) => String::from_utf8_lossy(b).into_owned(),
    }
}

/// Bytes as a JSON string (UTF-8, lossy) or null.
pub fn json_bytes(b: Option<&bytes::Bytes>) -> serde_json::Value {
    match b {
        None => serde_json::Value::Null,
        Some(b) => serde_json::Value::String(String::from_utf8_lossy(b).into_owned()),
    }
}
