//! The runtime of one quorum node: a dedicated thread that owns the [`MetadataNode`], ticks it,
//! feeds it commands and peers' messages, runs its disk I/O (fsync is blocking, so it never
//! runs on the async workers), and hands out what it produces: raft messages to a
//! [`Transport`], answers to their waiters, new images to the broker's publisher channel.
//!
//! Everything else talks to it through a cheap, cloneable [`QuorumHandle`].

use crate::disk::Disk;
use crate::node::{
    Answer, CommittedRead, MetadataNode, NodeConfig, NodeError, Publication, QuorumStatus, Token,
};
use controller::{ControllerError, Request};
use raft::eraftpb::Message;
use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

/// Sends raft messages to other voters. Best effort: a lost message is retried by Raft.
pub trait Transport: Send + Sync + 'static {
    fn send(&self, msg: Message);
}

/// A transport for a quorum of one: there is nobody to talk to.
#[derive(Debug, Default)]
pub struct NoPeers;

impl Transport for NoPeers {
    fn send(&self, msg: Message) {
        tracing::warn!(to = msg.to, "raft message for a peer in a one-voter quorum");
    }
}

/// How the runtime runs its node.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    pub node: NodeConfig,
    /// Milliseconds per raft tick (elections and heartbeats are counted in ticks).
    pub tick_ms: u64,
}

/// Who leads the quorum, as this node last saw it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Leadership {
    /// The leader's node id, if known.
    pub leader_id: Option<u64>,
    pub term: u64,
    /// Whether this node is the active controller.
    pub active: bool,
    /// The highest offset applied here.
    pub applied: u64,
    /// The end of the metadata log as this node knows it: a voter's last log index (written,
    /// maybe not yet committed), an observer's last seen high watermark.
    pub log_end: u64,
}

/// An observer that fetched committed metadata from this node (for DescribeQuorum).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObserverProgress {
    pub id: i32,
    /// The next offset it asked for, minus one: what it has.
    pub log_end: i64,
    pub last_fetch_ms: i64,
}

enum Command {
    Submit(Request, oneshot::Sender<Answer>),
    Step(Message),
    Read {
        from: u64,
        max_bytes: u64,
        deadline: Instant,
        observer: Option<i32>,
        reply: oneshot::Sender<CommittedRead>,
    },
    Status(oneshot::Sender<(QuorumStatus, Vec<ObserverProgress>)>),
    Stop,
}

/// A handle on a running quorum node. Cloning is cheap; the node stops when
/// [`QuorumHandle::stop`] is called (or every handle is dropped).
#[derive(Clone)]
pub struct QuorumHandle {
    node_id: u64,
    tx: std_mpsc::Sender<Command>,
    leadership: watch::Receiver<Leadership>,
    failure: watch::Receiver<Option<String>>,
}

impl std::fmt::Debug for QuorumHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumHandle")
            .field("node_id", &self.node_id)
            .finish()
    }
}

fn stopped() -> ControllerError {
    ControllerError::not_controller()
}

impl QuorumHandle {
    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    /// Decides a request on this node's controller; resolves once it is settled (committed,
    /// refused, or NOT_CONTROLLER because this node is not, or stopped being, the leader).
    pub async fn submit(&self, request: Request) -> Answer {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Command::Submit(request, tx)).is_err() {
            return Answer {
                token: 0,
                result: Err(stopped()),
                offset: -1,
            };
        }
        rx.await.unwrap_or(Answer {
            token: 0,
            result: Err(stopped()),
            offset: -1,
        })
    }

    /// Delivers a peer's raft message.
    pub fn step(&self, msg: Message) {
        let _ = self.tx.send(Command::Step(msg));
    }

    /// Committed entries from `from` (or the snapshot replacing them); waits up to `max_wait`
    /// for entries when there are none yet (an observer's long poll).
    pub async fn read_committed(
        &self,
        from: u64,
        max_bytes: u64,
        max_wait: Duration,
        observer: Option<i32>,
    ) -> Option<CommittedRead> {
        let (tx, rx) = oneshot::channel();
        let cmd = Command::Read {
            from,
            max_bytes,
            deadline: Instant::now() + max_wait,
            observer,
            reply: tx,
        };
        self.tx.send(cmd).ok()?;
        rx.await.ok()
    }

    /// The quorum as this node sees it, and the observers fetching from it.
    pub async fn status(&self) -> Option<(QuorumStatus, Vec<ObserverProgress>)> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(Command::Status(tx)).ok()?;
        rx.await.ok()
    }

    /// Who leads, as last seen; changes are watchable.
    pub fn leadership(&self) -> watch::Receiver<Leadership> {
        self.leadership.clone()
    }

    /// Why this node's quorum member stopped working (a failed metadata write, a log that
    /// lost entries it had acknowledged...), once it did; it never recovers by itself.
    pub fn failure(&self) -> watch::Receiver<Option<String>> {
        self.failure.clone()
    }

    /// Stops the node's thread (pending requests get NOT_CONTROLLER).
    pub fn stop(&self) {
        let _ = self.tx.send(Command::Stop);
    }
}

/// A running quorum node: its handle and its thread.
pub struct QuorumRuntime {
    pub handle: QuorumHandle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for QuorumRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumRuntime")
            .field("handle", &self.handle)
            .finish()
    }
}

impl QuorumRuntime {
    /// Opens the node on `disk` (rebuilding its image; the first publication, with the whole
    /// image, is sent before this returns) and starts its thread.
    pub fn start<D: Disk + 'static>(
        config: RuntimeConfig,
        disk: D,
        transport: std::sync::Arc<dyn Transport>,
        publications: mpsc::UnboundedSender<Publication>,
    ) -> Result<QuorumRuntime, NodeError> {
        let node_id = config.node.node_id;
        let logger = crate::raft_logger(node_id);
        let started = Instant::now();
        let mut node = MetadataNode::new(config.node.clone(), disk, &logger)?;
        node.run_io(0);
        let (tx, rx) = std_mpsc::channel();
        let (leadership_tx, leadership) = watch::channel(Leadership::default());
        let (failure_tx, failure) = watch::channel(None);
        let mut driver = Driver {
            node,
            transport,
            publications,
            leadership: leadership_tx,
            failure: failure_tx,
            started,
            tick: Duration::from_millis(config.tick_ms.max(1)),
            next_token: 1,
            waiters: HashMap::new(),
            reads: Vec::new(),
            observers: BTreeMap::new(),
        };
        driver.dispatch();
        let thread = std::thread::Builder::new()
            .name(format!("quorum-{node_id}"))
            .spawn(move || driver.run(rx))
            .map_err(|e| NodeError::Thread(e.to_string()))?;
        Ok(QuorumRuntime {
            handle: QuorumHandle {
                node_id,
                tx,
                leadership,
                failure,
            },
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.handle.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for QuorumRuntime {
    fn drop(&mut self) {
        self.handle.stop();
    }
}

struct PendingRead {
    from: u64,
    max_bytes: u64,
    deadline: Instant,
    reply: oneshot::Sender<CommittedRead>,
}

struct Driver<D: Disk> {
    node: MetadataNode<D>,
    transport: std::sync::Arc<dyn Transport>,
    publications: mpsc::UnboundedSender<Publication>,
    leadership: watch::Sender<Leadership>,
    failure: watch::Sender<Option<String>>,
    started: Instant,
    tick: Duration,
    next_token: Token,
    waiters: HashMap<Token, oneshot::Sender<Answer>>,
    reads: Vec<PendingRead>,
    observers: BTreeMap<i32, ObserverProgress>,
}

impl<D: Disk> Driver<D> {
    fn now_ms(&self) -> i64 {
        self.started.elapsed().as_millis() as i64
    }

    fn run(mut self, rx: std_mpsc::Receiver<Command>) {
        let mut next_tick = Instant::now() + self.tick;
        loop {
            let wait = next_tick.saturating_duration_since(Instant::now());
            let first = match rx.recv_timeout(wait) {
                Ok(c) => Some(c),
                Err(std_mpsc::RecvTimeoutError::Timeout) => None,
                Err(std_mpsc::RecvTimeoutError::Disconnected) => break,
            };
            let mut stop = false;
            if let Some(c) = first {
                stop |= self.handle(c);
                // Take whatever else is queued, so one I/O round serves many commands.
                while let Ok(c) = rx.try_recv() {
                    stop |= self.handle(c);
                }
            }
            if stop {
                break;
            }
            if Instant::now() >= next_tick {
                let now = self.now_ms();
                self.node.tick(now);
                next_tick += self.tick;
                if next_tick < Instant::now() {
                    next_tick = Instant::now() + self.tick;
                }
            }
            let now = self.now_ms();
            self.node.run_io(now);
            self.dispatch();
        }
        // Whoever still waits learns this node is gone.
        for (token, w) in self.waiters.drain() {
            let _ = w.send(Answer {
                token,
                result: Err(stopped()),
                offset: -1,
            });
        }
    }

    fn handle(&mut self, c: Command) -> bool {
        match c {
            Command::Submit(request, reply) => {
                let token = self.next_token;
                self.next_token += 1;
                self.waiters.insert(token, reply);
                let now = self.now_ms();
                self.node.submit(token, request, now);
            }
            Command::Step(m) => self.node.step(m),
            Command::Read {
                from,
                max_bytes,
                deadline,
                observer,
                reply,
            } => {
                if let Some(id) = observer {
                    let now = self.now_ms();
                    self.observers.insert(
                        id,
                        ObserverProgress {
                            id,
                            log_end: from as i64 - 1,
                            last_fetch_ms: now,
                        },
                    );
                }
                self.reads.push(PendingRead {
                    from,
                    max_bytes,
                    deadline,
                    reply,
                });
            }
            Command::Status(reply) => {
                let observers = self.observers.values().cloned().collect();
                let _ = reply.send((self.node.status(), observers));
            }
            Command::Stop => return true,
        }
        false
    }

    fn dispatch(&mut self) {
        let out = self.node.take_output();
        for m in out.messages {
            self.transport.send(m);
        }
        for a in out.answers {
            if let Some(w) = self.waiters.remove(&a.token) {
                let _ = w.send(a);
            }
        }
        if let Some(p) = out.published {
            let _ = self.publications.send(p);
        }
        let applied = self.node.applied();
        let now = Instant::now();
        let mut i = 0;
        while i < self.reads.len() {
            let r = &self.reads[i];
            if r.reply.is_closed() || applied >= r.from || now >= r.deadline {
                let r = self.reads.swap_remove(i);
                let read = self.node.read_committed(r.from, r.max_bytes);
                let _ = r.reply.send(read);
            } else {
                i += 1;
            }
        }
        if let Some(why) = self.node.failure() {
            if self.failure.borrow().is_none() {
                let _ = self.failure.send(Some(why.to_string()));
            }
        }
        let status = Leadership {
            leader_id: self.node.leader_id(),
            term: self.node.term(),
            active: self.node.is_active(),
            applied,
            log_end: self.node.last_index(),
        };
        self.leadership.send_if_modified(|l| {
            let changed = *l != status;
            *l = status;
            changed
        });
    }
}
