//! ACLs and their evaluation with the semantics of Kafka's `StandardAuthorizer`: resource
//! patterns (LITERAL, the LITERAL wildcard `*`, PREFIXED), principals (`User:name`, `User:*`),
//! hosts (`*` or an address), ALLOW/DENY with DENY winning, DESCRIBE implied by
//! READ/WRITE/DELETE/ALTER and DESCRIBE_CONFIGS by ALTER_CONFIGS (for ALLOW only),
//! `super.users`, and `allow.everyone.if.no.acl.found` applying only to resources no ACL
//! pattern matches at all. Also the filters of DescribeAcls/DeleteAcls and CreateAcls'
//! validation.

use crate::principal::KafkaPrincipal;
use model::acl::{AclOperation, PatternType, PermissionType, ResourceType};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::net::IpAddr;

/// The resource name matching any name in a LITERAL pattern.
pub const WILDCARD: &str = "*";
/// The only name of the CLUSTER resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// What an ACL applies to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourcePattern {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern_type: PatternType,
}

/// Who may (or may not) do what, from where.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AccessControlEntry {
    /// `Type:name`, e.g. `User:alice` or `User:*`.
    pub principal: String,
    /// `*` or a host address as Java prints it.
    pub host: String,
    pub operation: AclOperation,
    pub permission: PermissionType,
}

/// One ACL.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclBinding {
    pub pattern: ResourcePattern,
    pub entry: AccessControlEntry,
}

impl fmt::Display for AclBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "(pattern=ResourcePattern(resourceType={}, name={}, patternType={}), entry=(principal={}, host={}, operation={}, permissionType={}))",
            self.pattern.resource_type.name(),
            self.pattern.name,
            self.pattern.pattern_type.name(),
            self.entry.principal,
            self.entry.host,
            self.entry.operation.name(),
            self.entry.permission.name()
        )
    }
}

/// CreateAcls' checks (Kafka's `AclControlManager.validateNewAcl` and `AclApis`), on wire
/// codes so that UNKNOWN/ANY values get Kafka's messages. Returns the binding or the
/// INVALID_REQUEST message.
pub fn validate_new_acl(
    resource_type: i8,
    name: &str,
    pattern_type: i8,
    principal: &str,
    host: &str,
    operation: i8,
    permission: i8,
) -> Result<AclBinding, String> {
    let resource_type = ResourceType::from_code(resource_type)
        .ok_or_else(|| format!("Invalid resourceType {}", code_name(resource_type)))?;
    let pattern_type = PatternType::from_code(pattern_type)
        .ok_or_else(|| format!("Invalid patternType {}", pattern_code_name(pattern_type)))?;
    let operation = AclOperation::from_code(operation)
        .ok_or_else(|| format!("Invalid operation {}", code_name(operation)))?;
    let permission = PermissionType::from_code(permission)
        .ok_or_else(|| format!("Invalid permissionType {}", code_name(permission)))?;
    if name.is_empty() {
        return Err("Resource name should not be empty".into());
    }
    if resource_type == ResourceType::Cluster && name != CLUSTER_NAME {
        return Err(format!(
            "The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
        ));
    }
    if !principal.contains(':') {
        return Err(format!(
            "Could not parse principal from `{principal}` (no colon is present separating the principal type from the principal name)"
        ));
    }
    if KafkaPrincipal::parse(principal).is_err() {
        return Err(format!("Invalid principal {principal}"));
    }
    Ok(AclBinding {
        pattern: ResourcePattern {
            resource_type,
            name: name.to_string(),
            pattern_type,
        },
        entry: AccessControlEntry {
            principal: principal.to_string(),
            host: host.to_string(),
            operation,
            permission,
        },
    })
}

fn code_name(code: i8) -> &'static str {
    match code {
        0 => "UNKNOWN",
        1 => "ANY",
        _ => "UNKNOWN",
    }
}

fn pattern_code_name(code: i8) -> &'static str {
    match code {
        1 => "ANY",
        2 => "MATCH",
        _ => "UNKNOWN",
    }
}

/// How a filter matches pattern types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatternFilter {
    /// Any pattern type with exactly the filter's name.
    Any,
    /// Patterns that would match a resource of the filter's name.
    Match,
    Exact(PatternType),
}

/// DescribeAcls / DeleteAcls filters (`None` = any).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclBindingFilter {
    pub resource_type: Option<ResourceType>,
    pub name: Option<String>,
    pub pattern: PatternFilter,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Option<AclOperation>,
    pub permission: Option<PermissionType>,
}

impl AclBindingFilter {
    /// Everything.
    pub fn any() -> AclBindingFilter {
        AclBindingFilter {
            resource_type: None,
            name: None,
            pattern: PatternFilter::Any,
            principal: None,
            host: None,
            operation: None,
            permission: None,
        }
    }

    /// Builds a filter from wire codes; UNKNOWN anywhere is INVALID_REQUEST (the message).
    #[allow(clippy::too_many_arguments)]
    pub fn from_wire(
        resource_type: i8,
        name: Option<&str>,
        pattern_type: i8,
        principal: Option<&str>,
        host: Option<&str>,
        operation: i8,
        permission: i8,
    ) -> Result<AclBindingFilter, String> {
        use model::acl::filter_codes::{ANY, MATCH};
        let resource_type = match resource_type {
            ANY => None,
            c => Some(ResourceType::from_code(c).ok_or("Invalid resource type UNKNOWN")?),
        };
        let pattern = match pattern_type {
            ANY => PatternFilter::Any,
            MATCH => PatternFilter::Match,
            c => PatternFilter::Exact(
                PatternType::from_code(c).ok_or("Invalid pattern type UNKNOWN")?,
            ),
        };
        let operation = match operation {
            ANY => None,
            c => Some(AclOperation::from_code(c).ok_or("Invalid operation UNKNOWN")?),
        };
        let permission = match permission {
            ANY => None,
            c => Some(PermissionType::from_code(c).ok_or("Invalid permission type UNKNOWN")?),
        };
        Ok(AclBindingFilter {
            resource_type,
            name: name.map(str::to_string),
            pattern,
            principal: principal.map(str::to_string),
            host: host.map(str::to_string),
            operation,
            permission,
        })
    }

    /// Kafka's `AclBindingFilter.matches`.
    pub fn matches(&self, acl: &AclBinding) -> bool {
        let p = &acl.pattern;
        if self.resource_type.is_some_and(|t| t != p.resource_type) {
            return false;
        }
        if let PatternFilter::Exact(t) = self.pattern {
            if t != p.pattern_type {
                return false;
            }
        }
        let name_ok = match &self.name {
            None => true,
            Some(name) => match self.pattern {
                PatternFilter::Any | PatternFilter::Exact(_) => *name == p.name,
                PatternFilter::Match => match p.pattern_type {
                    PatternType::Literal => *name == p.name || p.name == WILDCARD,
                    PatternType::Prefixed => name.starts_with(&p.name),
                },
            },
        };
        if !name_ok {
            return false;
        }
        let e = &acl.entry;
        self.principal.as_ref().is_none_or(|x| *x == e.principal)
            && self.host.as_ref().is_none_or(|x| *x == e.host)
            && self.operation.is_none_or(|x| x == e.operation)
            && self.permission.is_none_or(|x| x == e.permission)
    }
}

/// Who asks, from where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestContext {
    pub principal: KafkaPrincipal,
    /// The client address as Java's `InetAddress.getHostAddress()` prints it.
    pub host: String,
}

impl RequestContext {
    pub fn new(principal: KafkaPrincipal, addr: IpAddr) -> RequestContext {
        RequestContext {
            principal,
            host: java_host_address(addr),
        }
    }
}

/// Java's `InetAddress.getHostAddress()`: dotted IPv4; IPv6 as eight lower-case hex groups
/// without leading zeros and without `::` compression.
pub fn java_host_address(addr: IpAddr) -> String {
    match addr {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => a
            .segments()
            .iter()
            .map(|s| format!("{s:x}"))
            .collect::<Vec<_>>()
            .join(":"),
    }
}

/// An authorization decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    Denied,
}

impl Decision {
    pub fn allowed(self) -> bool {
        self == Decision::Allowed
    }
}

/// The ACLs of a cluster plus the static authorizer config, indexed for evaluation. Built
/// from the metadata image whenever its ACLs change; immutable and shared afterwards.
#[derive(Clone, Debug, Default)]
pub struct Authorizer {
    /// `super.users` as `Type:name` strings.
    super_users: BTreeSet<String>,
    allow_if_no_acl: bool,
    literal: HashMap<(ResourceType, String), Vec<AccessControlEntry>>,
    prefixed: BTreeMap<(ResourceType, String), Vec<AccessControlEntry>>,
    count: usize,
}

impl Authorizer {
    /// `super_users`: Kafka's `super.users` value (`User:a;User:b`).
    pub fn new<'a>(
        super_users: &str,
        allow_if_no_acl: bool,
        acls: impl IntoIterator<Item = &'a AclBinding>,
    ) -> Authorizer {
        let mut a = Authorizer {
            super_users: parse_super_users(super_users),
            allow_if_no_acl,
            ..Authorizer::default()
        };
        for acl in acls {
            let key = (acl.pattern.resource_type, acl.pattern.name.clone());
            match acl.pattern.pattern_type {
                PatternType::Literal => a.literal.entry(key).or_default().push(acl.entry.clone()),
                PatternType::Prefixed => a.prefixed.entry(key).or_default().push(acl.entry.clone()),
            }
            a.count += 1;
        }
        a
    }

    pub fn acl_count(&self) -> usize {
        self.count
    }

    pub fn is_super_user(&self, principal: &KafkaPrincipal) -> bool {
        self.super_users.contains(&principal.to_string())
    }

    /// May `ctx` do `operation` on the resource `resource_type:name`?
    pub fn authorize(
        &self,
        ctx: &RequestContext,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> Decision {
        if self.is_super_user(&ctx.principal) {
            return Decision::Allowed;
        }
        let mut found_resource_acl = false;
        let mut allowed = false;
        let mut consider = |entries: &[AccessControlEntry]| -> bool {
            found_resource_acl |= !entries.is_empty();
            for e in entries {
                match entry_result(ctx, operation, e) {
                    Some(Decision::Denied) => return true,
                    Some(Decision::Allowed) => allowed = true,
                    None => {}
                }
            }
            false
        };
        if let Some(es) = self.literal.get(&(resource_type, name.to_string())) {
            if consider(es) {
                return Decision::Denied;
            }
        }
        if name != WILDCARD {
            if let Some(es) = self.literal.get(&(resource_type, WILDCARD.to_string())) {
                if consider(es) {
                    return Decision::Denied;
                }
            }
        }
        // PREFIXED patterns: every prefix of the name, the empty one included.
        let mut cut: Vec<usize> = name.char_indices().map(|(i, _)| i).collect();
        cut.push(name.len());
        for end in cut {
            if let Some(es) = self.prefixed.get(&(resource_type, name[..end].to_string())) {
                if consider(es) {
                    return Decision::Denied;
                }
            }
        }
        if allowed || (!found_resource_acl && self.allow_if_no_acl) {
            Decision::Allowed
        } else {
            Decision::Denied
        }
    }

    /// Kafka's `Authorizer.authorizeByResourceType`: may `ctx` do `operation` on at least one
    /// resource of the type (used for idempotent producers without IDEMPOTENT_WRITE: WRITE on
    /// any topic will do)? Allowed when a resource named `hardcode` would be; otherwise some
    /// ALLOW pattern must not be dominated by a DENY (a DENY on the same literal name or on a
    /// prefix of it); a wildcard DENY denies everything.
    pub fn authorize_by_resource_type(
        &self,
        ctx: &RequestContext,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> Decision {
        if self
            .authorize(ctx, operation, resource_type, "hardcode")
            .allowed()
        {
            return Decision::Allowed;
        }
        let matches = |e: &AccessControlEntry| {
            (e.host == ctx.host || e.host == WILDCARD)
                && (KafkaPrincipal::parse(&e.principal).is_ok_and(|p| p == ctx.principal)
                    || e.principal == "User:*")
                && (e.operation == operation || e.operation == AclOperation::All)
        };
        let mut deny_literal: BTreeSet<&str> = BTreeSet::new();
        let mut deny_prefixed: BTreeSet<&str> = BTreeSet::new();
        let mut allow: Vec<(PatternType, &str)> = Vec::new();
        let mut wildcard_allow = false;
        let literal = self
            .literal
            .iter()
            .map(|(k, v)| (PatternType::Literal, k, v));
        let prefixed = self
            .prefixed
            .iter()
            .map(|(k, v)| (PatternType::Prefixed, k, v));
        for (pattern_type, (t, name), entries) in literal.chain(prefixed) {
            if *t != resource_type {
                continue;
            }
            for e in entries.iter().filter(|e| matches(e)) {
                match (e.permission, pattern_type) {
                    (PermissionType::Deny, PatternType::Literal) => {
                        if name == WILDCARD {
                            return Decision::Denied;
                        }
                        deny_literal.insert(name);
                    }
                    (PermissionType::Deny, PatternType::Prefixed) => {
                        if name.is_empty() {
                            return Decision::Denied;
                        }
                        deny_prefixed.insert(name);
                    }
                    (PermissionType::Allow, PatternType::Literal) if name == WILDCARD => {
                        wildcard_allow = true;
                    }
                    (PermissionType::Allow, pt) => allow.push((pt, name)),
                }
            }
        }
        if wildcard_allow {
            return Decision::Allowed;
        }
        for (pt, name) in allow {
            if pt == PatternType::Literal && deny_literal.contains(name) {
                continue;
            }
            let dominated = name
                .char_indices()
                .map(|(i, c)| &name[..i + c.len_utf8()])
                .any(|prefix| deny_prefixed.contains(prefix));
            if !dominated {
                return Decision::Allowed;
            }
        }
        Decision::Denied
    }

    /// Kafka's authorized-operations bitfield for a resource: every operation the resource
    /// type supports that `ctx` is allowed.
    pub fn authorized_operations(
        &self,
        ctx: &RequestContext,
        resource_type: ResourceType,
        name: &str,
    ) -> i32 {
        resource_type
            .supported_operations()
            .iter()
            .filter(|op| self.authorize(ctx, **op, resource_type, name).allowed())
            .fold(0, |bits, op| bits | (1 << (*op as u8)))
    }
}

/// Parses `super.users` (`User:a;User:b`; spaces around entries ignored).
pub fn parse_super_users(value: &str) -> BTreeSet<String> {
    value
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Kafka's `StandardAuthorizerData.findResult` for one ACL whose pattern matches.
fn entry_result(
    ctx: &RequestContext,
    operation: AclOperation,
    e: &AccessControlEntry,
) -> Option<Decision> {
    let principal_ok = e.principal == "User:*"
        || KafkaPrincipal::parse(&e.principal).is_ok_and(|p| p == ctx.principal);
    if !principal_ok {
        return None;
    }
    if e.host != WILDCARD && e.host != ctx.host {
        return None;
    }
    if e.operation != AclOperation::All {
        if e.permission == PermissionType::Allow {
            use AclOperation::*;
            let ok = match operation {
                Describe => matches!(e.operation, Describe | Read | Write | Delete | Alter),
                DescribeConfigs => matches!(e.operation, DescribeConfigs | AlterConfigs),
                op => op == e.operation,
            };
            if !ok {
                return None;
            }
        } else if operation != e.operation {
            return None;
        }
    }
    Some(match e.permission {
        PermissionType::Allow => Decision::Allowed,
        PermissionType::Deny => Decision::Denied,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use AclOperation::*;
    use PermissionType::*;

    fn acl(
        t: ResourceType,
        name: &str,
        pt: PatternType,
        principal: &str,
        host: &str,
        op: AclOperation,
        perm: PermissionType,
    ) -> AclBinding {
        AclBinding {
            pattern: ResourcePattern {
                resource_type: t,
                name: name.into(),
                pattern_type: pt,
            },
            entry: AccessControlEntry {
                principal: principal.into(),
                host: host.into(),
                operation: op,
                permission: perm,
            },
        }
    }

    fn ctx(user: &str) -> RequestContext {
        RequestContext::new(KafkaPrincipal::user(user), "127.0.0.1".parse().unwrap())
    }

    use PatternType::{Literal, Prefixed};
    use ResourceType::{Cluster, Group, Topic};

    #[test]
    fn allow_deny_and_implied_operations() {
        let acls = vec![
            acl(Topic, "orders", Literal, "User:alice", "*", Read, Allow),
            acl(Topic, "orders", Literal, "User:alice", "*", Write, Deny),
            acl(Topic, "pay", Prefixed, "User:bob", "*", AlterConfigs, Allow),
            acl(Topic, "*", Literal, "User:carol", "*", All, Allow),
            acl(Topic, "payroll", Literal, "User:carol", "*", Read, Deny),
        ];
        let a = Authorizer::new("", false, &acls);
        assert!(a.authorize(&ctx("alice"), Read, Topic, "orders").allowed());
        // READ implies DESCRIBE.
        assert!(a
            .authorize(&ctx("alice"), Describe, Topic, "orders")
            .allowed());
        assert!(!a.authorize(&ctx("alice"), Write, Topic, "orders").allowed());
        assert!(!a.authorize(&ctx("alice"), Read, Topic, "other").allowed());
        // ALTER_CONFIGS implies DESCRIBE_CONFIGS, not DESCRIBE.
        assert!(a
            .authorize(&ctx("bob"), DescribeConfigs, Topic, "payments")
            .allowed());
        assert!(!a
            .authorize(&ctx("bob"), Describe, Topic, "payments")
            .allowed());
        assert!(!a
            .authorize(&ctx("bob"), DescribeConfigs, Topic, "pa")
            .allowed());
        // Wildcard ALLOW ALL, but the DENY on a literal wins.
        assert!(a
            .authorize(&ctx("carol"), Write, Topic, "anything")
            .allowed());
        assert!(!a.authorize(&ctx("carol"), Read, Topic, "payroll").allowed());
        // A DENY of READ does not deny DESCRIBE.
        assert!(a
            .authorize(&ctx("carol"), Describe, Topic, "payroll")
            .allowed());
        // Other resource types are untouched.
        assert!(!a.authorize(&ctx("carol"), Read, Group, "g").allowed());
    }

    #[test]
    fn hosts_wildcard_principal_and_super_users() {
        let acls = vec![
            acl(Group, "g", Literal, "User:*", "10.0.0.1", Read, Allow),
            acl(Group, "h", Literal, "User:*", "*", Read, Allow),
        ];
        let a = Authorizer::new("User:admin; User:ops", false, &acls);
        assert!(!a.authorize(&ctx("x"), Read, Group, "g").allowed());
        let remote = RequestContext::new(KafkaPrincipal::user("x"), "10.0.0.1".parse().unwrap());
        assert!(a.authorize(&remote, Read, Group, "g").allowed());
        assert!(a.authorize(&ctx("anyone"), Read, Group, "h").allowed());
        assert!(a
            .authorize(&ctx("admin"), Alter, Cluster, CLUSTER_NAME)
            .allowed());
        assert!(a.authorize(&ctx("ops"), Write, Topic, "t").allowed());
    }

    #[test]
    fn allow_everyone_if_no_acl_found_only_without_matching_patterns() {
        let acls = vec![acl(
            Topic,
            "secret",
            Prefixed,
            "User:alice",
            "*",
            Read,
            Allow,
        )];
        let open = Authorizer::new("", true, &acls);
        // No pattern matches "public": the default applies.
        assert!(open
            .authorize(&ctx("bob"), Write, Topic, "public")
            .allowed());
        // A pattern matches "secret-x" (for another principal): denied.
        assert!(!open
            .authorize(&ctx("bob"), Read, Topic, "secret-x")
            .allowed());
        let closed = Authorizer::new("", false, &acls);
        assert!(!closed
            .authorize(&ctx("bob"), Write, Topic, "public")
            .allowed());
    }

    #[test]
    fn by_resource_type() {
        let c = ctx("p");
        let a = Authorizer::new(
            "",
            false,
            &[acl(Topic, "foo", Prefixed, "User:p", "*", Write, Allow)],
        );
        assert!(a.authorize_by_resource_type(&c, Write, Topic).allowed());
        assert!(!a.authorize_by_resource_type(&c, Read, Topic).allowed());
        let a = Authorizer::new(
            "",
            false,
            &[
                acl(Topic, "foobar", Literal, "User:p", "*", Write, Allow),
                acl(Topic, "foo", Prefixed, "User:p", "*", Write, Deny),
            ],
        );
        assert!(!a.authorize_by_resource_type(&c, Write, Topic).allowed());
        let a = Authorizer::new(
            "",
            false,
            &[
                acl(Topic, "foobar", Literal, "User:p", "*", Write, Allow),
                acl(Topic, "*", Literal, "User:*", "*", Write, Deny),
            ],
        );
        assert!(!a.authorize_by_resource_type(&c, Write, Topic).allowed());
        let a = Authorizer::new(
            "",
            false,
            &[acl(Topic, "*", Literal, "User:*", "*", All, Allow)],
        );
        assert!(a.authorize_by_resource_type(&c, Write, Topic).allowed());
    }

    #[test]
    fn filters() {
        let a1 = acl(Topic, "foo", Prefixed, "User:p", "*", Write, Allow);
        let a2 = acl(Topic, "*", Literal, "User:q", "*", Read, Deny);
        let a3 = acl(Topic, "foobar", Literal, "User:q", "*", Read, Allow);
        let mut f = AclBindingFilter::any();
        assert!(f.matches(&a1) && f.matches(&a2));
        f.name = Some("foobar".into());
        f.pattern = PatternFilter::Match;
        assert!(f.matches(&a1) && f.matches(&a2) && f.matches(&a3));
        f.pattern = PatternFilter::Any;
        assert!(!f.matches(&a1) && f.matches(&a3));
        f.pattern = PatternFilter::Exact(Prefixed);
        f.name = None;
        assert!(f.matches(&a1) && !f.matches(&a3));
        let f = AclBindingFilter::from_wire(1, None, 1, Some("User:q"), None, 1, 2).unwrap();
        assert!(f.matches(&a2) && !f.matches(&a3));
        assert!(AclBindingFilter::from_wire(0, None, 1, None, None, 1, 1).is_err());
    }

    #[test]
    fn create_validation() {
        assert!(validate_new_acl(2, "t", 3, "User:a", "*", 3, 3).is_ok());
        assert_eq!(
            validate_new_acl(1, "t", 3, "User:a", "*", 3, 3),
            Err("Invalid resourceType ANY".into())
        );
        assert_eq!(
            validate_new_acl(2, "t", 2, "User:a", "*", 3, 3),
            Err("Invalid patternType MATCH".into())
        );
        assert!(validate_new_acl(2, "t", 3, "User:a", "*", 1, 3).is_err());
        assert!(validate_new_acl(2, "t", 3, "User:a", "*", 3, 1).is_err());
        assert!(validate_new_acl(2, "", 3, "User:a", "*", 3, 3).is_err());
        assert!(validate_new_acl(2, "t", 3, "alice", "*", 3, 3).is_err());
        assert!(validate_new_acl(4, "other", 3, "User:a", "*", 3, 3).is_err());
        assert!(validate_new_acl(4, CLUSTER_NAME, 3, "User:a", "*", 7, 3).is_ok());
    }

    #[test]
    fn java_addresses() {
        assert_eq!(java_host_address("::1".parse().unwrap()), "0:0:0:0:0:0:0:1");
        assert_eq!(
            java_host_address("fe80::1:abcd".parse().unwrap()),
            "fe80:0:0:0:0:0:1:abcd"
        );
    }

    /// A direct transcription of the rules, to check the indexed evaluation against: every
    /// ACL whose pattern matches the name, DENY first, then ALLOW, then the default.
    fn model(
        super_users: &BTreeSet<String>,
        allow_if_none: bool,
        acls: &[AclBinding],
        c: &RequestContext,
        op: AclOperation,
        t: ResourceType,
        name: &str,
    ) -> bool {
        if super_users.contains(&c.principal.to_string()) {
            return true;
        }
        let relevant: Vec<&AclBinding> = acls
            .iter()
            .filter(|a| {
                a.pattern.resource_type == t
                    && match a.pattern.pattern_type {
                        Literal => a.pattern.name == name || a.pattern.name == WILDCARD,
                        Prefixed => name.starts_with(&a.pattern.name),
                    }
            })
            .collect();
        let results: Vec<Decision> = relevant
            .iter()
            .filter_map(|a| entry_result(c, op, &a.entry))
            .collect();
        if results.contains(&Decision::Denied) {
            false
        } else if results.contains(&Decision::Allowed) {
            true
        } else {
            relevant.is_empty() && allow_if_none
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]
        #[test]
        fn indexed_evaluation_equals_the_model(
            raw in proptest::collection::vec((0usize..3, 0usize..5, proptest::prelude::any::<bool>(), 0usize..3, proptest::prelude::any::<bool>(), 0usize..6, proptest::prelude::any::<bool>()), 0..12),
            user in 0usize..3, host in proptest::prelude::any::<bool>(), op in 0usize..6, t in 0usize..3, name in 0usize..5,
            allow_if_none in proptest::prelude::any::<bool>(), su in proptest::prelude::any::<bool>(),
        ) {
            let types = [Topic, Group, Cluster];
            let names = ["", "a", "ab", "abc", "*"];
            let users = ["User:u0", "User:u1", "User:*"];
            let ops = [Read, Write, Describe, DescribeConfigs, AlterConfigs, All];
            let acls: Vec<AclBinding> = raw.iter().map(|(t, n, pre, u, h, o, allow)| acl(
                types[*t], names[*n], if *pre { Prefixed } else { Literal }, users[*u],
                if *h { "*" } else { "10.1.1.1" }, ops[*o], if *allow { Allow } else { Deny })).collect();
            let supers = if su { "User:u1" } else { "" };
            let a = Authorizer::new(supers, allow_if_none, &acls);
            let c = RequestContext::new(
                KafkaPrincipal::user(format!("u{}", user)),
                if host { "10.1.1.1" } else { "127.0.0.1" }.parse().unwrap(),
            );
            let op = ops[op];
            if op == All { return Ok(()); }
            let expected = model(&parse_super_users(supers), allow_if_none, &acls, &c, op, types[t], names[name]);
            proptest::prop_assert_eq!(a.authorize(&c, op, types[t], names[name]).allowed(), expected);
        }
    }
}
