//! Field-by-field comparison of two transcripts of the same run, and the list of differences
//! kept on purpose.

use crate::runner::Entry;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::path::Path;

/// One field that differs: its path and both values.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PathDiff {
    pub path: String,
    pub reference: Value,
    pub subject: Value,
}

/// The differing fields of two JSON values (leaf paths; arrays of different lengths compare
/// their common prefix and report the extra entries).
pub fn diff(a: &Value, b: &Value) -> Vec<PathDiff> {
    let mut out = Vec::new();
    walk("", a, b, &mut out);
    out
}

fn join(path: &str, seg: &str) -> String {
    if path.is_empty() {
        seg.to_string()
    } else {
        format!("{path}.{seg}")
    }
}

fn walk(path: &str, a: &Value, b: &Value, out: &mut Vec<PathDiff>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = join(path, k);
                walk(
                    &p,
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let p = join(path, &i.to_string());
                match (x.get(i), y.get(i)) {
                    (Some(p1), Some(p2)) => walk(&p, p1, p2, out),
                    (p1, p2) => out.push(PathDiff {
                        path: p,
                        reference: p1.cloned().unwrap_or(Value::Null),
                        subject: p2.cloned().unwrap_or(Value::Null),
                    }),
                }
            }
        }
        _ if a == b => {}
        _ => out.push(PathDiff {
            path: path.to_string(),
            reference: a.clone(),
            subject: b.clone(),
        }),
    }
}

/// A difference Moldau keeps on purpose: responses of `api` differ at paths starting with
/// `path` (`*` matches one segment), for `reason`. The optional conditions narrow it to
/// requests containing `request` (a partial match), to `versions`, and to differences whose
/// values are exactly `reference` / `subject`. A condition written as JSON `null` is a
/// condition (the value is null: no answer, a missing element), not the absence of one.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Intentional {
    pub api: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<[i16; 2]>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub reference: Option<Value>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub subject: Option<Value>,
    pub reason: String,
}

/// A field that is present is `Some`, even when it is `null` (serde's `Option` would read a
/// `null` as absent, turning "the reference answered nothing" into "any value").
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl Intentional {
    fn matches(&self, api: &str, version: Option<i16>, request: &Value, d: &PathDiff) -> bool {
        if self.api != api && self.api != "*" {
            return false;
        }
        if let (Some([lo, hi]), Some(v)) = (self.versions, version) {
            if v < lo || v > hi {
                return false;
            }
        }
        if self
            .request
            .as_ref()
            .is_some_and(|want| !contains(request, want))
            || self.reference.as_ref().is_some_and(|r| *r != d.reference)
            || self.subject.as_ref().is_some_and(|r| *r != d.subject)
        {
            return false;
        }
        let pat: Vec<&str> = self.path.split('.').collect();
        let segs: Vec<&str> = d.path.split('.').collect();
        segs.len() >= pat.len() && pat.iter().zip(&segs).all(|(p, s)| *p == "*" || p == s)
    }
}

/// Whether `have` contains every member of `want` (recursively; each element of a wanted
/// array in some element of the array there, wherever it stands: a request naming an
/// internal topic second matches an entry that names only that topic).
fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| h.get(k).is_some_and(|hv| contains(hv, wv))),
        (Value::Array(h), Value::Array(w)) => {
            w.iter().all(|wv| h.iter().any(|hv| contains(hv, wv)))
        }
        _ => have == want,
    }
}

/// Reads the list of intentional differences.
pub fn load_intentional(path: &Path) -> anyhow::Result<Vec<Intentional>> {
    use anyhow::Context;
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parse {}", path.display()))
}

/// A step whose outcomes differ.
#[derive(Clone, Debug, Serialize)]
pub struct StepDiff {
    pub step: usize,
    pub api: String,
    pub version: Option<i16>,
    pub request: Value,
    pub paths: Vec<PathDiff>,
    /// Set when every differing path is an intentional difference: its reason.
    pub kept: Option<String>,
    pub reference_raw: Value,
    pub subject_raw: Value,
}

/// The comparison of one run of one scenario.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunReport {
    pub scenario: String,
    pub run: usize,
    pub prefix: String,
    pub compared: usize,
    pub skipped: usize,
    pub diffs: Vec<StepDiff>,
    pub harness_errors: Vec<String>,
    /// Every step's normalised outcome on both sides: (step, api, version, reference,
    /// subject).
    pub transcript: Vec<(usize, String, Option<i16>, Value, Value)>,
}

impl RunReport {
    /// Differences not listed as intentional.
    pub fn failures(&self) -> impl Iterator<Item = &StepDiff> {
        self.diffs.iter().filter(|d| d.kept.is_none())
    }

    pub fn failed(&self) -> bool {
        self.failures().next().is_some() || !self.harness_errors.is_empty()
    }
}

/// Compares the transcripts of one run on the reference and the subject.
pub fn compare_runs(
    scenario: &str,
    run: usize,
    prefix: &str,
    reference: &[Entry],
    subject: &[Entry],
    intentional: &[Intentional],
) -> RunReport {
    let mut r = RunReport {
        scenario: scenario.to_string(),
        run,
        prefix: prefix.to_string(),
        ..RunReport::default()
    };
    for (side, entries) in [("reference", reference), ("subject", subject)] {
        for e in entries {
            if let Some(err) = e.harness_error() {
                r.harness_errors
                    .push(format!("{side}: step {} ({}): {err}", e.step, e.api));
            }
        }
    }
    for i in 0..reference.len().max(subject.len()) {
        let (a, b) = match (reference.get(i), subject.get(i)) {
            (Some(a), Some(b)) => (a, b),
            (a, b) => {
                let e = a.or(b);
                r.diffs.push(StepDiff {
                    step: e.map_or(i, |e| e.step),
                    api: e.map_or_else(String::new, |e| e.api.clone()),
                    version: e.and_then(|e| e.version),
                    request: e.map_or(Value::Null, |e| e.request.clone()),
                    paths: vec![PathDiff {
                        path: "transcript".into(),
                        reference: json!(a.is_some()),
                        subject: json!(b.is_some()),
                    }],
                    kept: None,
                    reference_raw: a.map_or(Value::Null, |e| e.raw.clone()),
                    subject_raw: b.map_or(Value::Null, |e| e.raw.clone()),
                });
                continue;
            }
        };
        r.transcript.push((
            a.step,
            a.api.clone(),
            a.version,
            a.outcome.clone(),
            b.outcome.clone(),
        ));
        if a.outcome.get("skipped").is_some() && b.outcome.get("skipped").is_some() {
            r.skipped += 1;
            continue;
        }
        if !a.compare {
            continue;
        }
        r.compared += 1;
        let paths = diff(&a.outcome, &b.outcome);
        if paths.is_empty() {
            continue;
        }
        let kept = paths
            .iter()
            .map(|p| {
                intentional
                    .iter()
                    .find(|k| k.matches(&a.api, a.version, &a.request, p))
            })
            .collect::<Option<Vec<_>>>()
            .map(|ks| {
                let mut reasons: Vec<&str> = ks.iter().map(|k| k.reason.as_str()).collect();
                reasons.dedup();
                reasons.join("; ")
            });
        r.diffs.push(StepDiff {
            step: a.step,
            api: a.api.clone(),
            version: a.version,
            request: a.request.clone(),
            paths,
            kept,
            reference_raw: a.raw.clone(),
            subject_raw: b.raw.clone(),
        });
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_paths() {
        let d = diff(
            &json!({"a": [1, {"b": 2}], "c": 1}),
            &json!({"a": [1, {"b": 3}, 4], "c": 1}),
        );
        assert_eq!(
            d,
            vec![
                PathDiff {
                    path: "a.1.b".into(),
                    reference: json!(2),
                    subject: json!(3)
                },
                PathDiff {
                    path: "a.2".into(),
                    reference: Value::Null,
                    subject: json!(4)
                },
            ]
        );
    }

    #[test]
    fn intentional_matching() {
        let k = Intentional {
            api: "DescribeConfigs".into(),
            path: "response.results.*.configs".into(),
            request: Some(json!({"resources": [{"resource_type": 4}]})),
            versions: Some([1, 3]),
            reference: None,
            subject: None,
            reason: "r".into(),
        };
        let d = |path: &str| PathDiff {
            path: path.into(),
            reference: json!(1),
            subject: json!(2),
        };
        let req = json!({"resources": [{"resource_type": 4, "resource_name": ""}]});
        assert!(k.matches(
            "DescribeConfigs",
            Some(2),
            &req,
            &d("response.results.0.configs.3.value")
        ));
        assert!(!k.matches(
            "DescribeConfigs",
            Some(4),
            &req,
            &d("response.results.0.configs.3.value")
        ));
        assert!(!k.matches(
            "DescribeConfigs",
            Some(2),
            &req,
            &d("response.results.0.error_code")
        ));
        let other = json!({"resources": [{"resource_type": 2}]});
        assert!(!k.matches(
            "DescribeConfigs",
            Some(2),
            &other,
            &d("response.results.0.configs")
        ));
        assert!(!k.matches("Metadata", Some(2), &req, &d("response.results.0.configs")));
        // A wanted element matches wherever it stands in the request's array.
        let second = json!({"resources": [{"resource_type": 2}, {"resource_type": 4}]});
        assert!(k.matches(
            "DescribeConfigs",
            Some(2),
            &second,
            &d("response.results.1.configs")
        ));
        let valued = Intentional {
            reference: Some(json!(1)),
            subject: Some(json!(3)),
            ..k.clone()
        };
        assert!(!valued.matches(
            "DescribeConfigs",
            Some(2),
            &req,
            &d("response.results.0.configs")
        ));
    }

    #[test]
    fn a_null_value_condition_is_a_condition() {
        let k: Intentional = serde_json::from_value(json!({
            "api": "Produce", "path": "response", "reference": null, "reason": "r"
        }))
        .unwrap();
        assert_eq!(k.reference, Some(Value::Null));
        assert_eq!(k.subject, None);
        let unanswered = PathDiff {
            path: "response".into(),
            reference: Value::Null,
            subject: json!({"responses": []}),
        };
        assert!(k.matches("Produce", Some(9), &json!({}), &unanswered));
        // Both answered and differ in one field: not this entry's difference.
        let field = PathDiff {
            path: "response.responses.0.partition_responses.0.log_start_offset".into(),
            reference: json!(-1),
            subject: json!(0),
        };
        assert!(!k.matches("Produce", Some(9), &json!({}), &field));
    }
}
