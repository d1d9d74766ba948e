//! A broker's life with the controller: registration (a new incarnation and broker epoch at
//! each start), heartbeats (which unfence it once it caught up with the metadata log, and keep
//! its session), re-registration when the controller no longer knows its epoch, and the
//! controlled shutdown that moves leadership away before the process exits.

use crate::state::BrokerState;
use crate::BrokerError;
use controller::{RegisterBroker, Reply, Request};
use model::ErrorCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Written at registration: the broker epoch of this data dir's last registration. Sent again
/// after a restart (`previous_broker_epoch`), it lets the controller accept the new incarnation
/// at once instead of waiting for the old session to expire: only the process that owns this
/// data dir can know it.
const EPOCH_FILE: &str = "broker.epoch";

fn read_previous_epoch(state: &BrokerState) -> i64 {
    std::fs::read_to_string(state.data_dir().join(EPOCH_FILE))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(-1)
}

fn write_epoch(state: &BrokerState, epoch: i64) {
    let path = state.data_dir().join(EPOCH_FILE);
    let tmp = state.data_dir().join(format!("{EPOCH_FILE}.tmp"));
    let r = std::fs::write(&tmp, epoch.to_string()).and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = r {
        tracing::warn!(error = %e, "could not record the broker epoch");
    }
}

/// The cluster id this broker registers with: configured, else the one its data dir or the
/// committed metadata names.
fn cluster_id(state: &BrokerState) -> String {
    state
        .config
        .cluster_id
        .clone()
        .or_else(|| {
            crate::bootstrap::read_meta(state.data_dir())
                .ok()
                .and_then(|m| m.cluster_id)
        })
        .unwrap_or_else(|| state.image().cluster_id.clone())
}

/// Registers with the active controller (retrying until it answers), then heartbeats until the
/// controller unfences this broker and this node has applied that change.
pub async fn register(state: &Arc<BrokerState>, incarnation: &str) -> Result<(), BrokerError> {
    let mut backoff = Duration::from_millis(20);
    let mut last_log = Instant::now();
    let epoch = loop {
        if state.cancel.is_cancelled() {
            return Err(BrokerError::Stopped);
        }
        // A new cluster gets its id from its first active controller: wait to learn it.
        let cluster_id = cluster_id(state);
        if cluster_id.is_empty() {
            tokio::select! {
                _ = state.cancel.cancelled() => return Err(BrokerError::Stopped),
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
            continue;
        }
        let request = Request::RegisterBroker(RegisterBroker {
            node_id: state.node_id,
            cluster_id,
            incarnation_id: incarnation.to_string(),
            endpoints: state.endpoints.clone(),
            rack: state.config.broker_rack.clone(),
            previous_broker_epoch: read_previous_epoch(state),
        });
        let answer = state.controller.submit(request).await;
        match answer.result {
            Ok(Reply::RegisterBroker(Ok(epoch))) => break epoch,
            Ok(Reply::RegisterBroker(Err(e))) | Err(e)
                if e.code == ErrorCode::InconsistentClusterId =>
            {
                return Err(BrokerError::Identity(e.message));
            }
            Ok(Reply::RegisterBroker(Err(e))) | Err(e) => {
                if last_log.elapsed() > Duration::from_secs(5) {
                    tracing::info!(error = %e, "broker registration not accepted yet; retrying");
                    last_log = Instant::now();
                }
            }
            Ok(other) => tracing::error!(?other, "unexpected registration reply"),
        }
        tokio::select! {
            _ = state.cancel.cancelled() => return Err(BrokerError::Stopped),
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_millis(500));
    };
    state.broker_epoch.store(epoch, Ordering::Release);
    write_epoch(state, epoch);
    tracing::info!(broker_epoch = epoch, "broker registered");
    // Heartbeat until unfenced (the controller unfences a broker once it caught up).
    loop {
        if state.cancel.is_cancelled() {
            return Err(BrokerError::Stopped);
        }
        match heartbeat(state, false).await {
            Ok((reply, offset)) if !reply.is_fenced => {
                state.wait_applied(offset).await;
                state.prefetch_producer_ids();
                return Ok(());
            }
            Ok(_) => {}
            Err(e) if e == ErrorCode::StaleBrokerEpoch || e == ErrorCode::BrokerIdNotRegistered => {
                return Box::pin(register(state, incarnation)).await;
            }
            Err(_) => {}
        }
        tokio::select! {
            _ = state.cancel.cancelled() => return Err(BrokerError::Stopped),
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
}

/// One heartbeat; the reply and the offset it was committed at.
async fn heartbeat(
    state: &BrokerState,
    want_shutdown: bool,
) -> Result<(controller::HeartbeatReply, i64), ErrorCode> {
    let request = Request::BrokerHeartbeat {
        node_id: state.node_id,
        broker_epoch: state.broker_epoch.load(Ordering::Acquire),
        current_metadata_offset: state.applied_offset(),
        want_fence: false,
        want_shutdown,
    };
    let answer = state.controller.submit(request).await;
    match answer.result {
        Ok(Reply::BrokerHeartbeat(Ok(r))) => Ok((r, answer.offset)),
        Ok(Reply::BrokerHeartbeat(Err(e))) | Err(e) => Err(e.code),
        Ok(_) => Err(ErrorCode::UnknownServerError),
    }
}

/// Heartbeats every `broker.heartbeat.interval.ms` until the broker stops; re-registers when
/// the controller no longer knows this broker's epoch.
pub async fn heartbeat_loop(state: Arc<BrokerState>, incarnation: String) {
    let every = Duration::from_millis(state.config.broker_heartbeat_interval_ms.max(10) as u64);
    loop {
        tokio::select! {
            _ = state.cancel.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        match heartbeat(&state, false).await {
            Ok((reply, _)) if reply.is_fenced => {
                tracing::debug!("broker is fenced; the controller unfences it once it caught up");
            }
            Ok(_) => {}
            Err(e) if e == ErrorCode::StaleBrokerEpoch || e == ErrorCode::BrokerIdNotRegistered => {
                tracing::warn!(error = %e, "the controller no longer knows this broker's epoch; registering again");
                if let Err(e) = register(&state, &incarnation).await {
                    tracing::warn!(error = %e, "re-registration failed");
                }
            }
            Err(e) => tracing::debug!(error = %e, "heartbeat not answered"),
        }
    }
}

/// Asks the controller to move leadership away from this broker and waits (up to `deadline`)
/// until it says the broker may shut down.
pub async fn controlled_shutdown(state: &BrokerState, deadline: Duration) {
    if state.broker_epoch.load(Ordering::Acquire) < 0 {
        return;
    }
    // The last live broker has nowhere to move leadership to (and, when the others are gone,
    // often no quorum to commit the request): waiting would only delay the exit.
    if !state
        .image()
        .live_brokers()
        .any(|b| b.node_id != state.node_id)
    {
        tracing::info!("controlled shutdown: no other live broker to move leadership to");
        return;
    }
    let until = Instant::now() + deadline;
    while Instant::now() < until {
        match heartbeat(state, true).await {
            Ok((reply, offset)) if reply.should_shut_down => {
                state.wait_applied(offset).await;
                tracing::info!("controlled shutdown: leadership moved away");
                return;
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "controlled shutdown heartbeat not answered"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tracing::warn!("controlled shutdown did not complete in time; stopping anyway");
}
