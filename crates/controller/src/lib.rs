//! The cluster controller as a sans-IO state machine.
//!
//! Inputs: committed metadata images (from the Raft log, in order), requests (topic and config
//! administration, broker registration and heartbeats, producer-id blocks), and the current
//! time. Outputs: the metadata records to propose, with the reply each request gets once they
//! are committed, and the next deadline (broker session expiry).
//!
//! Only the *active* controller (the Raft leader, once it has applied everything committed
//! before its term) decides anything. It decides against a **speculative image**: the committed
//! image plus every batch it proposed that is not committed yet, so two requests in flight see
//! each other (the second CreateTopics of a name fails even before the first commits). When
//! leadership is lost the speculative image and the pending batches are dropped; the runtime
//! answers the requests still waiting with NOT_CONTROLLER. No I/O, no clock, no randomness
//! beyond a seeded generator: a simulation can replay any run.
//!
//! ```text
//! let d = controller.handle(request, now)?;     // records + reply, already in the speculative image
//! match raft.propose(encode_batch(&d.records)) {
//!     Ok(index) => pending.insert(index, d.reply),   // answer when `index` commits
//!     Err(_) => controller.abandon_last(),            // not proposed: forget it
//! }
//! // for every committed batch, in order:
//! controller.on_commit(image_after, ours);
//! ```

mod controller;
pub mod election;
pub mod placement;
pub mod policy;
pub mod reassignment;

pub use controller::{
    acl_binding, acl_entry, ConfigChange, ConfigResource, Controller, ControllerConfig,
    CreatedTopic, Decision, ElectionResults, HeartbeatReply, IsrChange, Origin, PartitionResults,
    RegisterBroker, Reply, Request, ScramUpsertion, TopicRef, TopicSpec,
};
pub use election::Election;

use model::ErrorCode;

/// The controller mutation quota (KIP-599) of the client a CreateTopics, CreatePartitions or
/// DeleteTopics came from, as Kafka's `ControllerRequestContext.applyPartitionChangeQuota`:
/// the controller applies it to each topic's partition count once the topic passed its
/// other checks (so a refused topic costs nothing), before it writes anything for it. The
/// quota, its state and its clock belong to the caller; the controller only asks.
pub trait MutationQuota: std::fmt::Debug + Send + Sync {
    /// Takes `partitions` mutations, or refuses them with THROTTLING_QUOTA_EXCEEDED.
    fn apply(&self, partitions: u32) -> Result<(), ControllerError>;
}

/// A request's mutation quota; `None`: not subject to one.
pub type MutationQuotaRef = Option<std::sync::Arc<dyn MutationQuota>>;

/// A rejected request: Kafka's error code and a message for the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ControllerError {
    pub code: ErrorCode,
    pub message: String,
}

impl ControllerError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ControllerError {
        ControllerError {
            code,
            message: message.into(),
        }
    }

    /// An error Kafka answers without naming the problem (its `ApiError` carries no
    /// message): an empty message, which [`Self::wire_message`] leaves off the wire.
    pub fn bare(code: ErrorCode) -> ControllerError {
        ControllerError::new(code, "")
    }

    /// The error message a response carries for this error: none for a bare error (an
    /// empty message) and for UNKNOWN_SERVER_ERROR (Kafka leaks no server detail), else the
    /// message. Where Kafka's answer is the error's default text, the error carries it
    /// ([`ErrorCode::default_message`]).
    pub fn wire_message(&self) -> Option<&str> {
        let bare = self.message.is_empty() || self.code == ErrorCode::UnknownServerError;
        (!bare).then_some(self.message.as_str())
    }

    /// This node is not the active controller (or stopped being it before the answer).
    pub fn not_controller() -> ControllerError {
        ControllerError::new(
            ErrorCode::NotController,
            "This node is not the active controller.",
        )
    }
}
