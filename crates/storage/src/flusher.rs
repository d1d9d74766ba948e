//! The flusher pool: a fixed number of threads that run the group-committed fsyncs of every
//! log, instead of one OS thread per log (6,000 partitions used to mean 6,000 threads).
//!
//! A log asks for a flush by queueing itself once (a flag per log keeps it from being queued
//! twice); a pool thread takes it, fsyncs it (all appends that landed meanwhile are covered by
//! that one fsync) and queues it again if more was requested during the fsync. Logs are
//! served in the order they asked, so one busy partition cannot starve the others.
//!
//! Ownership: a [`Flusher`] owns its threads and stops (and joins) them when dropped. Logs hold
//! only its queue, so a log never keeps the threads alive, and a thread never drops the
//! owner. A request made after the pool stopped runs the fsync on the caller's thread.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::log::Shared;

/// Threads of the pool [`Flusher::shared_default`] hands to logs opened without one.
const DEFAULT_THREADS: usize = 2;

/// The queue of logs waiting for an fsync, shared by the pool's threads and the logs.
pub(crate) struct FlushQueue {
    waiting: Mutex<VecDeque<Arc<Shared>>>,
    wake: Condvar,
    stopped: AtomicBool,
}

impl std::fmt::Debug for FlushQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlushQueue")
            .field("waiting", &self.waiting.lock().len())
            .finish()
    }
}

impl FlushQueue {
    /// Queues `log` for an fsync unless it is already queued.
    pub(crate) fn request(&self, log: &Arc<Shared>) {
        if log.flush_queued.swap(true, Ordering::AcqRel) {
            return;
        }
        if self.stopped.load(Ordering::Acquire) {
            log.flush_queued.store(false, Ordering::Release);
            log.flush_if_requested();
            return;
        }
        self.waiting.lock().push_back(Arc::clone(log));
        self.wake.notify_one();
    }

    fn run(&self) {
        loop {
            let log = {
                let mut w = self.waiting.lock();
                loop {
                    if let Some(log) = w.pop_front() {
                        break log;
                    }
                    if self.stopped.load(Ordering::Acquire) {
                        return;
                    }
                    self.wake.wait(&mut w);
                }
            };
            log.flush_queued.store(false, Ordering::Release);
            if log.flush_if_requested() {
                // More was asked for while the fsync ran: it goes to the back of the line.
                self.request(&log);
            }
        }
    }
}

/// A pool of flusher threads. Dropping it stops and joins them (after the queued fsyncs).
pub struct Flusher {
    queue: Arc<FlushQueue>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Flusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flusher")
            .field("threads", &self.threads.lock().len())
            .finish()
    }
}

impl Flusher {
    /// Starts a pool of `threads` threads (at least one).
    pub fn new(threads: usize) -> std::io::Result<Arc<Flusher>> {
        let queue = Arc::new(FlushQueue {
            waiting: Mutex::new(VecDeque::new()),
            wake: Condvar::new(),
            stopped: AtomicBool::new(false),
        });
        let mut handles = Vec::new();
        for i in 0..threads.max(1) {
            let q = Arc::clone(&queue);
            handles.push(
                std::thread::Builder::new()
                    .name(format!("log-flusher-{i}"))
                    .spawn(move || q.run())?,
            );
        }
        Ok(Arc::new(Flusher {
            queue,
            threads: Mutex::new(handles),
        }))
    }

    /// The process-wide pool used by logs opened without one (tests, tools).
    pub fn shared_default() -> Arc<Flusher> {
        static POOL: OnceLock<Arc<Flusher>> = OnceLock::new();
        Arc::clone(POOL.get_or_init(|| match Flusher::new(DEFAULT_THREADS) {
            Ok(p) => p,
            // Without threads every request runs its fsync on the caller's thread.
            Err(e) => {
                tracing::error!(error = %e, "cannot start flusher threads; fsyncs run inline");
                Arc::new(Flusher {
                    queue: Arc::new(FlushQueue {
                        waiting: Mutex::new(VecDeque::new()),
                        wake: Condvar::new(),
                        stopped: AtomicBool::new(true),
                    }),
                    threads: Mutex::new(Vec::new()),
                })
            }
        }))
    }

    pub(crate) fn queue(&self) -> Arc<FlushQueue> {
        Arc::clone(&self.queue)
    }

    /// Threads in the pool.
    pub fn threads(&self) -> usize {
        self.threads.lock().len()
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        {
            // Under the lock, so a thread between its empty check and its wait can't miss it.
            let _w = self.queue.waiting.lock();
            self.queue.stopped.store(true, Ordering::Release);
        }
        self.queue.wake.notify_all();
        for h in self.threads.lock().drain(..) {
            let _ = h.join();
        }
    }
}
