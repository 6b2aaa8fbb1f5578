//! Threads of lower priority for the work no reader waits on: decoding a list from the
//! upstream, installing it in a cache, rendering `/metrics` and collecting the admin `/status`
//! (whose memory estimates walk every cached object).
//!
//! A relist of a large type is seconds of CPU (parsing every object, the diff against the old
//! state, the posting sets). Readers of every type are answered by the tokio workers, which
//! that work would otherwise share the cores with as an equal: on a small machine under load,
//! a relist of one type then slows the reads of all the others. Run at a higher nice value,
//! it gets the cores the workers leave idle, and only a small share of those they want
//! (nice 10 weighs about a ninth of nice 0 in Linux's scheduler), so readers hardly notice it,
//! and it still finishes when the machine stays busy. Its answers are late by what readers
//! used meanwhile; the cache serves its previous state until then, as it does while the list
//! is read from the upstream.
//!
//! The threads end when the last handle to the pool is dropped. Linux keeps a nice value per
//! thread; elsewhere it belongs to the whole process, and the threads run at normal priority.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// How much nicer than the process the pool's threads are: see the module docs.
pub(crate) const NICE: i32 = 10;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A handle to the pool; cheap to clone.
#[derive(Clone)]
pub(crate) struct Background {
    jobs: mpsc::Sender<Job>,
}

impl Background {
    /// A pool of `threads` threads (at least one) named `kcache-background`.
    pub(crate) fn start(threads: usize) -> std::io::Result<Background> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        for _ in 0..threads.max(1) {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name("kcache-background".into())
                .spawn(move || {
                    lower_priority();
                    loop {
                        // The lock is held only while waiting for the next job, never while
                        // running one.
                        let job = match queue.lock() {
                            Ok(q) => q.recv(),
                            Err(_) => return,
                        };
                        match job {
                            Ok(job) => job(),
                            Err(_) => return,
                        }
                    }
                })?;
        }
        Ok(Background { jobs })
    }

    /// A pool as large as the machine: every core can help when the workers leave it idle.
    pub(crate) fn for_this_machine() -> std::io::Result<Background> {
        Self::start(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// Runs `f` on the pool and waits for its answer. A panic in `f` is resumed here, in
    /// the caller, as if `f` had run in it.
    pub(crate) async fn run<T, F>(&self, f: F) -> T
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(std::panic::catch_unwind(AssertUnwindSafe(f)));
        });
        if let Err(mpsc::SendError(job)) = self.jobs.send(job) {
            // Every thread is gone (they end only with the pool, or by a panic outside a job,
            // which cannot happen): do it here rather than never.
            job();
        }
        match rx.await {
            Ok(Ok(v)) => v,
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(_) => unreachable!("a background job always answers before its sender drops"),
        }
    }
}

impl std::fmt::Debug for Background {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Background").finish_non_exhaustive()
    }
}

#[cfg(target_os = "linux")]
fn lower_priority() {
    // On Linux the nice value set on a thread id is that thread's alone. Relative to the
    // process's own (a kcache started under `nice` keeps the difference), and never above
    // the maximum, which would be refused.
    let tid = Some(rustix::thread::gettid());
    let now = rustix::process::getpriority_process(tid).unwrap_or(0);
    if let Err(e) = rustix::process::setpriority_process(tid, (now + NICE).min(19)) {
        tracing::warn!(error = %e, "background threads keep normal priority");
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_priority() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_and_resumes_panics_in_the_caller() {
        let pool = Background::start(2).unwrap();
        assert_eq!(pool.run(|| 6 * 7).await, 42);
        let p = pool.clone();
        let panicked = tokio::spawn(async move { p.run(|| panic!("boom")).await }).await;
        assert!(panicked.unwrap_err().is_panic());
        // The pool survives a job's panic.
        assert_eq!(pool.run(|| "still here").await, "still here");
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn its_threads_are_nicer_than_the_caller() {
        let pool = Background::start(1).unwrap();
        let theirs = pool
            .run(|| rustix::process::getpriority_process(Some(rustix::thread::gettid())))
            .await
            .unwrap();
        let ours = rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap();
        assert_eq!(theirs, (ours + NICE).min(19));
    }
}
