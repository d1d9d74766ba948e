//! The Moldau broker runtime: it composes metadata, storage and the protocol into a server.
//!
//! [`Broker::start`] binds the listener, opens the metadata log and every partition log, and
//! serves until [`BrokerHandle::shutdown`] (or drop) stops it: stop accepting, finish
//! in-flight requests, flush, write clean-shutdown markers.

mod connection;
mod groups;
mod handlers;
mod log_dirs;
mod memory;
pub mod metrics;
mod replica;
mod state;
mod txn;
mod txn_markers;
mod txn_partition;

use model::BrokerConfig;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use state::BrokerState;

/// Why the broker could not start.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("bind {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("data dir {path}: {source}")]
    DataDir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("metadata: {0}")]
    Metadata(#[from] metadata::MetadataError),
    #[error("advertised address {0:?} is not HOST:PORT")]
    Advertise(String),
}

/// A running broker.
pub struct Broker;

/// Owns a running broker: its address, and the means to stop it. Dropping the handle
/// cancels the broker without waiting; call [`BrokerHandle::shutdown`] to wait for a clean stop.
pub struct BrokerHandle {
    addr: SocketAddr,
    data_dir: PathBuf,
    state: Arc<BrokerState>,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

impl std::fmt::Debug for BrokerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerHandle")
            .field("addr", &self.addr)
            .finish()
    }
}

impl Broker {
    /// Starts a broker on the current tokio runtime.
    pub async fn start(config: BrokerConfig) -> Result<BrokerHandle, BrokerError> {
        let listener =
            TcpListener::bind(&config.listen)
                .await
                .map_err(|source| BrokerError::Bind {
                    addr: config.listen.clone(),
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| BrokerError::Bind {
            addr: config.listen.clone(),
            source,
        })?;
        let advertised = match &config.advertise {
            Some(a) => a.clone(),
            None => addr.to_string(),
        };
        let (host, port) = advertised
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.to_string(), p.parse::<i32>().ok()?)))
            .ok_or_else(|| BrokerError::Advertise(advertised.clone()))?;
        let data_dir = PathBuf::from(&config.data_dir);
        let cancel = CancellationToken::new();
        let tasks = TaskTracker::new();
        let state = BrokerState::open(config, &host, port, cancel.clone(), tasks.clone())?;
        state.start_background();
        let accept_state = state.clone();
        let accept_cancel = cancel.clone();
        let accept_tasks = tasks.clone();
        tasks.spawn(async move {
            connection::accept_loop(listener, accept_state, accept_cancel, accept_tasks).await;
        });
        Ok(BrokerHandle {
            addr,
            data_dir,
            state,
            cancel,
            tasks,
        })
    }
}

impl BrokerHandle {
    /// The address the listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn data_dir(&self) -> &std::path::Path {
        &self.data_dir
    }

    /// The shared broker state (for embedding and tests).
    pub fn state(&self) -> &Arc<BrokerState> {
        &self.state
    }

    /// Stops accepting, lets in-flight requests finish, flushes every log and writes the
    /// clean-shutdown markers.
    pub async fn shutdown(self) {
        self.cancel.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        self.state.close_logs();
    }
}

impl Drop for BrokerHandle {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}
