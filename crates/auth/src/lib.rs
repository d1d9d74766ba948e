//! Moldau's security cores, sans-IO (no sockets, no clock reads, no randomness of their own):
//! SASL mechanisms (PLAIN, SCRAM-SHA-256/512) and the per-connection SASL state machine,
//! principals and `ssl.principal.mapping.rules`, certificate subjects as Kafka prints them,
//! ACL evaluation with Kafka's `StandardAuthorizer` semantics, and client quota accounting as
//! Kafka's `ClientQuotaManager` does it. The broker does the I/O around them.

pub mod acl;
pub mod dn;
pub mod mapping;
pub mod principal;
pub mod quota;
pub mod sasl;
pub mod scram;
pub mod session;

pub use acl::{AclBinding, AclBindingFilter, Authorizer, Decision, RequestContext};
pub use principal::{Authentication, KafkaPrincipal, PrincipalBuilder};
pub use sasl::{CredentialSet, Mechanism, SaslError};
pub use scram::{ScramCredential, ScramMechanism};
pub use session::SaslSession;
