//! Subscription regexes (KIP-848 `SubscribedTopicRegex`) as Kafka evaluates them: Kafka
//! compiles them with RE2/J (`com.google.re2j.Pattern`) and a topic matches when the whole
//! name matches (`Matcher.matches()`). Moldau uses the Rust `regex` crate, also an RE2-family
//! engine (no backreferences, no lookaround, linear-time matching), anchored the same way.
//!
//! Known differences, none of which changes a match against a Kafka topic name (ASCII
//! `[a-zA-Z0-9._-]`):
//! - `\Q...\E` quoting is RE2/J syntax the `regex` crate lacks; it is translated here into
//!   escaped literals, so such patterns behave as in Kafka.
//! - `\d`, `\w`, `\s`, `\b` are ASCII in RE2/J and Unicode-aware in `regex` (equal on ASCII).
//! - The `regex` crate also accepts the `x` (verbose) flag and `\z`-style syntax RE2/J
//!   rejects, so a few patterns Kafka answers INVALID_REGULAR_EXPRESSION are accepted here;
//!   no pattern Kafka accepts is rejected, except RE2/J's `\C` (any byte), which `regex`
//!   does not support.
//! - Compiled patterns are capped at 1 MiB of program (`regex`'s size limit) so a hostile
//!   pattern cannot exhaust memory; Kafka has no such cap.

use regex::{Regex, RegexBuilder};

/// The longest pattern accepted, in bytes (Kafka strings are at most 32767 bytes anyway).
const PATTERN_BYTES_MAX: usize = 16 * 1024;

/// A compiled subscription regex.
#[derive(Clone, Debug)]
pub struct TopicRegex {
    anchored: Regex,
}

impl TopicRegex {
    /// Compiles a pattern; the error text follows Kafka's
    /// "SubscribedTopicRegex `p` is not a valid regular expression: reason.".
    pub fn compile(pattern: &str) -> Result<TopicRegex, String> {
        let invalid = |why: &str| {
            format!("SubscribedTopicRegex `{pattern}` is not a valid regular expression: {why}.")
        };
        if pattern.len() > PATTERN_BYTES_MAX {
            return Err(invalid("the pattern is too long"));
        }
        let translated = translate_quotes(pattern);
        // The pattern alone must be valid: wrapping it first could pair up parentheses that
        // are unbalanced on their own (`)(`).
        build(&translated).map_err(|e| invalid(&first_line(&e)))?;
        let anchored =
            build(&format!("^(?:{translated})$")).map_err(|e| invalid(&first_line(&e)))?;
        Ok(TopicRegex { anchored })
    }

    /// Whether a topic name matches as a whole.
    pub fn matches(&self, topic: &str) -> bool {
        self.anchored.is_match(topic)
    }
}

fn build(pattern: &str) -> Result<Regex, String> {
    RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .dfa_size_limit(1 << 20)
        .build()
        .map_err(|e| e.to_string())
}

fn first_line(e: &str) -> String {
    e.lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or("invalid")
        .trim()
        .trim_start_matches("error: ")
        .to_string()
}

/// Rewrites RE2/J's `\Q...\E` literal sections as escaped text.
fn translate_quotes(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut rest = pattern;
    while let Some(i) = rest.find("\\Q") {
        // A `\Q` preceded by an odd number of backslashes is an escaped backslash + Q.
        let backslashes = rest[..i].chars().rev().take_while(|c| *c == '\\').count();
        if backslashes % 2 == 1 {
            out.push_str(&rest[..i + 2]);
            rest = &rest[i + 2..];
            continue;
        }
        out.push_str(&rest[..i]);
        let quoted = &rest[i + 2..];
        match quoted.find("\\E") {
            Some(end) => {
                out.push_str(&regex::escape(&quoted[..end]));
                rest = &quoted[end + 2..];
            }
            None => {
                out.push_str(&regex::escape(quoted));
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_name_matches_like_re2j() {
        let r = TopicRegex::compile("orders-.*").unwrap();
        assert!(r.matches("orders-eu"));
        assert!(!r.matches("old-orders-eu"));
        let r = TopicRegex::compile("a|b").unwrap();
        assert!(r.matches("a") && r.matches("b") && !r.matches("ab"));
    }

    #[test]
    fn invalid_patterns_are_refused_with_kafkas_message() {
        for bad in ["(", ")(", "[a-", "a{2,1}", "(?<=a)b", "\\1"] {
            let e = TopicRegex::compile(bad).unwrap_err();
            assert!(
                e.starts_with(&format!(
                    "SubscribedTopicRegex `{bad}` is not a valid regular expression: "
                )),
                "{e}"
            );
        }
    }

    #[test]
    fn quoted_sections_are_literals() {
        let r = TopicRegex::compile("\\Qa.b\\E-.*").unwrap();
        assert!(r.matches("a.b-x"));
        assert!(!r.matches("aXb-x"));
    }
}
