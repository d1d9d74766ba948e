//! `ssl.principal.mapping.rules`: Kafka's `SslPrincipalMapper`, which turns a client
//! certificate's subject (RFC 2253) into a user name with `RULE:pattern/replacement/[LU]` rules
//! and `DEFAULT`, tried in order.
//!
//! Rules are Java regular expressions in Kafka; here they are compiled by the `regex` crate,
//! which accepts the same syntax for everything the rules are used for (groups, classes, lazy
//! quantifiers, anchors) but not back-references or look-around: a rule using those is a
//! config error at startup. Replacement strings follow Java's `Matcher.replaceAll` rules
//! (`$n` group references read greedily up to the group count, `\x` escapes), including
//! Kafka's treatment of references past the group count as literal text.

use regex::Regex;
use std::fmt;
use std::sync::OnceLock;

/// Kafka's `RULE_PATTERN`: group 1 = `DEFAULT`, 2 = the pattern, 4 = the replacement,
/// 6 = `L`/`U`, 7 = anything else (an invalid or empty rule).
const RULE_PATTERN: &str = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)";

fn splitter() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        #[allow(clippy::unwrap_used)] // a constant pattern, covered by the tests
        Regex::new(&format!(r"\s*({RULE_PATTERN})\s*(,\s*|$)")).unwrap()
    })
}

fn parser() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        #[allow(clippy::unwrap_used)] // a constant pattern, covered by the tests
        Regex::new(&format!("^(?:{RULE_PATTERN})")).unwrap()
    })
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MappingError {
    #[error("Invalid rule: {0}")]
    InvalidRule(String),
    #[error("Invalid rule: `{rule}`, unmatched substring: `{rest}`")]
    Unmatched { rule: String, rest: String },
    #[error("rule pattern {pattern:?} is not supported: {reason}")]
    UnsupportedPattern { pattern: String, reason: String },
    #[error("No rules apply to {dn}, rules {rules}")]
    NoMatchingRule { dn: String, rules: String },
    #[error("rule {rule} cannot build a name for {dn}: {reason}")]
    Replacement {
        rule: String,
        dn: String,
        reason: String,
    },
}

#[derive(Clone, Debug)]
enum Rule {
    Default,
    Replace {
        source: String,
        /// The pattern anchored at both ends, for Java's `matches()`.
        whole: Regex,
        /// The pattern as written, for Java's `replaceAll`.
        find: Regex,
        replacement: String,
        lower: bool,
        upper: bool,
    },
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Default => f.write_str("DEFAULT"),
            Rule::Replace {
                source,
                replacement,
                lower,
                upper,
                ..
            } => {
                write!(f, "RULE:{source}/{replacement}")?;
                if *lower {
                    f.write_str("/L")
                } else if *upper {
                    f.write_str("/U")
                } else {
                    Ok(())
                }
            }
        }
    }
}

/// The parsed `ssl.principal.mapping.rules` (default: `DEFAULT`, the subject unchanged).
#[derive(Clone, Debug)]
pub struct SslPrincipalMapper {
    rules: Vec<Rule>,
}

impl Default for SslPrincipalMapper {
    fn default() -> Self {
        SslPrincipalMapper {
            rules: vec![Rule::Default],
        }
    }
}

impl fmt::Display for SslPrincipalMapper {
    /// Kafka's `toString()`: `SslPrincipalMapper(rules = [RULE:..., DEFAULT])`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SslPrincipalMapper(rules = {})", self.rules_text())
    }
}

impl SslPrincipalMapper {
    /// Parses the config value as Kafka does (rules separated by commas, whitespace around
    /// them ignored, empty rules skipped).
    pub fn parse(rules: &str) -> Result<SslPrincipalMapper, MappingError> {
        let trimmed = rules.trim();
        let mut out = Vec::new();
        for caps in splitter().captures_iter(trimmed) {
            let rule = caps.get(1).map_or("", |m| m.as_str());
            let m = parser()
                .captures(rule)
                .ok_or_else(|| MappingError::InvalidRule(rule.to_string()))?;
            let end = m.get(0).map_or(0, |g| g.end());
            if end != rule.len() {
                return Err(MappingError::Unmatched {
                    rule: rule.to_string(),
                    rest: rule[end..].to_string(),
                });
            }
            if m.get(1).is_some() {
                out.push(Rule::Default);
            } else if let Some(pattern) = m.get(2) {
                let source = pattern.as_str().to_string();
                let compile = |p: &str| {
                    Regex::new(p).map_err(|e| MappingError::UnsupportedPattern {
                        pattern: source.clone(),
                        reason: e.to_string(),
                    })
                };
                let flag = m.get(6).map_or("", |g| g.as_str());
                out.push(Rule::Replace {
                    whole: compile(&format!("^(?:{source})$"))?,
                    find: compile(&source)?,
                    replacement: m.get(4).map_or("", |g| g.as_str()).to_string(),
                    source,
                    lower: flag == "L",
                    upper: flag == "U",
                });
            }
        }
        Ok(SslPrincipalMapper { rules: out })
    }

    fn rules_text(&self) -> String {
        let parts: Vec<String> = self.rules.iter().map(ToString::to_string).collect();
        format!("[{}]", parts.join(", "))
    }

    /// The user name for a certificate subject: the first rule that applies.
    pub fn name(&self, dn: &str) -> Result<String, MappingError> {
        for rule in &self.rules {
            if let Some(name) = apply(rule, dn)? {
                return Ok(name);
            }
        }
        Err(MappingError::NoMatchingRule {
            dn: dn.to_string(),
            rules: self.rules_text(),
        })
    }
}

fn apply(rule: &Rule, dn: &str) -> Result<Option<String>, MappingError> {
    let Rule::Replace {
        whole,
        find,
        replacement,
        lower,
        upper,
        ..
    } = rule
    else {
        return Ok(Some(dn.to_string()));
    };
    if !whole.is_match(dn) {
        return Ok(None);
    }
    let groups = find.captures_len() - 1;
    let replacement = escape_literal_back_references(replacement, groups);
    let result =
        java_replace_all(find, dn, &replacement).map_err(|reason| MappingError::Replacement {
            rule: rule.to_string(),
            dn: dn.to_string(),
            reason,
        })?;
    Ok(Some(if *lower {
        result.to_lowercase()
    } else if *upper {
        result.to_uppercase()
    } else {
        result
    }))
}

/// Kafka's `escapeLiteralBackReferences` (from Apache NiFi): a `$n` naming a group past the
/// pattern's group count (after dropping trailing digits while it is >= 10) is escaped, so it
/// stays literal text.
fn escape_literal_back_references(unescaped: &str, groups: usize) -> String {
    if groups == 0 {
        return unescaped.to_string();
    }
    let mut value = unescaped.to_string();
    // Positions of `$` followed by digits in the original string; each insertion shifts the
    // later ones by one, as Kafka's loop over the (stale) matcher does.
    let bytes = unescaped.as_bytes();
    let mut shift = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() && bytes[i + 1].is_ascii_digit() {
            let start = i + 1;
            let mut end = start;
            while end < bytes.len() && bytes[end].is_ascii_digit() {
                end += 1;
            }
            let digits = &unescaped[start..end];
            i = end;
            if digits.starts_with('0') {
                continue;
            }
            // Saturate rather than overflow on absurdly long numbers (Kafka would throw).
            let mut index: u64 = digits.parse().unwrap_or(u64::MAX);
            while index > groups as u64 && index >= 10 {
                index /= 10;
            }
            if index > groups as u64 {
                let at = start - 1 + shift;
                value.insert(at, '\\');
                shift += 1;
            }
            continue;
        }
        i += 1;
    }
    value
}

/// Java's `Matcher.replaceAll` with its replacement syntax: `\x` is a literal `x`; `$n`
/// reads digits greedily while the number stays within the group count; `${name}` names a
/// group; a group that did not participate adds nothing.
fn java_replace_all(re: &Regex, input: &str, replacement: &str) -> Result<String, String> {
    let mut out = String::with_capacity(input.len());
    let mut last = 0;
    let mut search = 0;
    while search <= input.len() {
        let Some(caps) = re.captures_at(input, search) else {
            break;
        };
        let Some(m) = caps.get(0) else { break };
        out.push_str(&input[last..m.start()]);
        expand(&caps, re, replacement, &mut out)?;
        last = m.end();
        search = if m.start() == m.end() {
            // Java bumps past an empty match by one character.
            match input[m.end()..].chars().next() {
                Some(c) => m.end() + c.len_utf8(),
                None => break,
            }
        } else {
            m.end()
        };
    }
    out.push_str(&input[last..]);
    Ok(out)
}

fn expand(
    caps: &regex::Captures<'_>,
    re: &Regex,
    replacement: &str,
    out: &mut String,
) -> Result<(), String> {
    let groups = re.captures_len() - 1;
    let mut chars = replacement.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(x) => out.push(x),
                None => return Err("character to be escaped is missing".into()),
            },
            '$' => {
                if chars.peek() == Some(&'{') {
                    chars.next();
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(x) if x.is_ascii_alphanumeric() => name.push(x),
                            _ => return Err("named capturing group is missing trailing '}'".into()),
                        }
                    }
                    if re.capture_names().flatten().all(|n| n != name) {
                        return Err(format!("No group with name {{{name}}}"));
                    }
                    if let Some(g) = caps.name(&name) {
                        out.push_str(g.as_str());
                    }
                    continue;
                }
                let first = match chars.next() {
                    Some(d) if d.is_ascii_digit() => d as usize - '0' as usize,
                    _ => return Err("Illegal group reference".into()),
                };
                if first > groups {
                    return Err(format!("No group {first}"));
                }
                let mut index = first;
                while let Some(&d) = chars.peek() {
                    if !d.is_ascii_digit() {
                        break;
                    }
                    let next = index * 10 + (d as usize - '0' as usize);
                    if next > groups {
                        break;
                    }
                    index = next;
                    chars.next();
                }
                if let Some(g) = caps.get(index) {
                    out.push_str(g.as_str());
                }
            }
            _ => out.push(c),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    // The cases of Kafka's SslPrincipalMapperTest.

    #[test]
    fn valid_rules() {
        for r in [
            "DEFAULT",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
            "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
            "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
            "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
            "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
            "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
        ] {
            SslPrincipalMapper::parse(r).unwrap_or_else(|e| panic!("{r}: {e}"));
        }
    }

    #[test]
    fn invalid_rules() {
        for r in [
            "default",
            "DEFAUL",
            "DEFAULT/L",
            "DEFAULT/U",
            "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
            "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
        ] {
            assert!(
                SslPrincipalMapper::parse(r).is_err(),
                "{r} should be invalid"
            );
        }
    }

    #[test]
    fn mapper() {
        let rules = [
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
            "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
            "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
            "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
            "DEFAULT",
        ]
        .join(", ");
        let m = SslPrincipalMapper::parse(&rules).unwrap();
        assert_eq!(
            m.name("CN=Duke,OU=ServiceUsers,O=Org,C=US").unwrap(),
            "duke"
        );
        assert_eq!(
            m.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US").unwrap(),
            "duke@sme"
        );
        assert_eq!(m.name("cn=duke,ou=sme,dc=mycp,dc=com").unwrap(), "DUKE@SME");
        assert_eq!(
            m.name("cN=duke,OU=JavaSoft,O=Sun Microsystems").unwrap(),
            "DUKE"
        );
        assert_eq!(
            m.name("OU=JavaSoft,O=Sun Microsystems,C=US").unwrap(),
            "OU=JavaSoft,O=Sun Microsystems,C=US"
        );
    }

    fn splitting(expected: &str, rules: &str) {
        let m = SslPrincipalMapper::parse(rules).unwrap_or_else(|e| panic!("{rules}: {e}"));
        assert_eq!(
            m.to_string(),
            format!("SslPrincipalMapper(rules = {expected})"),
            "rules {rules:?}"
        );
    }

    #[test]
    fn rules_splitting() {
        splitting("[]", "");
        splitting("[DEFAULT]", "DEFAULT");
        splitting("[RULE:/]", "RULE://");
        splitting("[RULE:/.*]", "RULE:/.*/");
        splitting("[RULE:/.*/L]", "RULE:/.*/L");
        splitting("[RULE:/, DEFAULT]", "RULE://,DEFAULT");
        splitting("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  ");
        splitting(
            "[RULE:   /     , DEFAULT]",
            "  RULE:   /     / ,  DEFAULT  ",
        );
        splitting(
            "[RULE:  /     /U, DEFAULT]",
            "  RULE:  /     /U   ,DEFAULT  ",
        );
        splitting(
            "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]",
            "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
        );
        splitting("[]", ",   , , ,      , , ,   ");
        splitting("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,");
        splitting(
            "[RULE: /   , DEFAULT]",
            ",  , RULE: /   /    ,,,   DEFAULT, ,   ",
        );
        splitting(
            "[RULE:   /  /U, DEFAULT]",
            "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,",
        );
        splitting(r"[RULE:\/\\\(\)\n\t/\/\/]", r"RULE:\/\\\(\)\n\t/\/\//");
        splitting(
            r"[RULE:\**\/+/*/L, RULE:\/*\**/**]",
            r"RULE:\**\/+/*/L,RULE:\/*\**/**/",
        );
        splitting(
            r"[RULE:,RULE:,/,RULE:,\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]",
            r"RULE:,RULE:,/,RULE:,\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT",
        );
    }

    #[test]
    fn comma_with_whitespace() {
        let m = SslPrincipalMapper::parse(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT").unwrap();
        assert_eq!(
            m.name(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz").unwrap(),
            r"Tkac\, Adam"
        );
    }

    #[test]
    fn no_rule_applies() {
        let m = SslPrincipalMapper::parse("RULE:^CN=(.*?),OU=A$/$1/").unwrap();
        let e = m.name("CN=x,OU=B").unwrap_err();
        assert_eq!(
            e.to_string(),
            "No rules apply to CN=x,OU=B, rules [RULE:^CN=(.*?),OU=A$/$1]"
        );
    }

    #[test]
    fn java_replacement_semantics() {
        // `$12` with one group reads as `$1` then a literal `2`; `$3` past the group count is
        // literal text (Kafka escapes it); `\$` is a dollar sign.
        let m = SslPrincipalMapper::parse(r"RULE:^CN=([a-z]+)$/$12-$3-\$/").unwrap();
        assert_eq!(m.name("CN=bob").unwrap(), "bob2-$3-$");
        // replaceAll replaces every match of an unanchored pattern.
        let m = SslPrincipalMapper::parse("RULE:([a-z])/<$1>/").unwrap();
        assert_eq!(m.name("a").unwrap(), "<a>");
        // Back-references are not supported by the regex engine: a startup error.
        assert!(matches!(
            SslPrincipalMapper::parse(r"RULE:^(a)\1$/x/"),
            Err(MappingError::UnsupportedPattern { .. })
        ));
    }
}
