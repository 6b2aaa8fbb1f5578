//! An HTTP/2 connection's watch streams, run in the connection's own task.
//!
//! hyper serves every HTTP/2 request in a task of its own (it hands each stream's future to the
//! connection's executor). For a watch that costs, per delivered event, a task wake-up through
//! tokio's scheduler (often onto the other worker thread than the connection's), and then the
//! stream's frame handed across threads to the connection's task under h2's connection lock.
//! h2 also wakes a stream when it grants the stream capacity and when it writes the stream's
//! frames, so each event came to three scheduled polls per stream. At 10k watchers on a few
//! connections that machinery was about a third of kcache's CPU per delivery (BENCHMARKS.md,
//! "Measured apart from the bench", has the figures before and after this module).
//!
//! So each HTTP/2 connection gets an executor of its own ([`StreamExecutor`]). It starts every
//! stream as a task, as hyper would: a request is handled on whichever worker is free, and a
//! large LIST streams in parallel with the connection's other requests. When a stream says it
//! is a long-lived watch ([`join_connection`], called by the watcher once its initial events
//! are out), its future leaves its task and joins the connection's task ([`Connection`]).
//! There a wake-up only queues the stream, and each poll of the connection first polls the
//! queued streams once (a sweep), then the connection, which writes the frames they queued. An
//! event costs one scheduled task per connection instead of per stream, and h2's two wake-ups
//! of a stream for that event come to one more poll of it in the next sweep.
//!
//! Flow control and slow clients are as before: a stream whose window is spent waits without
//! holding up the others (its watcher is not polled, falls behind the history, and gets the 410
//! it would get on its own task), and a reset stream ends its watcher at once. HTTP/1.1
//! connections never use the executor (one response at a time, already in the connection's
//! task); they pass through [`Connection`] too, because the protocol is known only once the
//! first bytes are read, at the cost of one atomic swap per poll. `tests/http2.rs` runs these
//! cases through a real HTTP/2 client, and the rule tests of WATCH run over HTTP/2 as well.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

type Stream = Pin<Box<dyn Future<Output = ()> + Send>>;

tokio::task_local! {
    /// Set by [`join_connection`] while a stream started by a [`StreamExecutor`] is polled.
    static JOIN: Cell<bool>;
}

/// Ask to move the stream being served into its connection's task (see the module docs). Does
/// nothing outside a stream of an HTTP/2 connection served by kcache, or once moved.
pub(crate) fn join_connection() {
    let _ = JOIN.try_with(|join| join.set(true));
}

/// What a connection's task and its streams share: the streams that asked to join it and the
/// joined streams woken since its last sweep.
#[derive(Default)]
struct Shared {
    inbox: Mutex<Inbox>,
    /// Something is in the inbox. Read first, so that a poll of the connection with nothing
    /// for the sweep (every poll of an HTTP/1.1 connection) costs one atomic swap.
    pending: AtomicBool,
    task: AtomicWaker,
}

#[derive(Default)]
struct Inbox {
    joining: Vec<Stream>,
    woken: Vec<usize>,
    /// The connection's future is gone: a stream that asks to join stays in its own task.
    closed: bool,
}

impl Shared {
    fn inbox(&self) -> MutexGuard<'_, Inbox> {
        self.inbox.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wake the connection's task for what was just put in the inbox.
    fn notify(&self) {
        self.pending.store(true, Ordering::Release);
        self.task.wake();
    }
}

/// The executor hyper gets for one connection's streams.
#[derive(Clone)]
pub(crate) struct StreamExecutor {
    shared: Arc<Shared>,
}

impl<F> hyper::rt::Executor<F> for StreamExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, stream: F) {
        tokio::spawn(Started {
            stream: Some(Box::pin(stream)),
            shared: self.shared.clone(),
        });
    }
}

/// A stream in a task of its own until it asks to join its connection.
struct Started {
    stream: Option<Stream>,
    shared: Arc<Shared>,
}

impl Future for Started {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(stream) = self.stream.as_mut() else {
            return Poll::Ready(());
        };
        let (polled, join) = JOIN.sync_scope(Cell::new(false), || {
            let polled = stream.as_mut().poll(cx);
            (polled, JOIN.with(Cell::get))
        });
        if polled.is_ready() || !join {
            return polled;
        }
        let this = &mut *self;
        let mut inbox = this.shared.inbox();
        if inbox.closed {
            // The connection is gone: the stream ends on its own, here.
            return Poll::Pending;
        }
        // Its wakers still name this task, which ends here: the connection polls it as soon as
        // it arrives, which points them at the connection's task (a future registers its
        // waker on every poll), and nothing that happened in between is lost (an event, a
        // reset or a timer leaves its mark in the state the next poll reads).
        inbox.joining.extend(this.stream.take());
        drop(inbox);
        this.shared.notify();
        Poll::Ready(())
    }
}

/// An executor for one connection's streams, and what runs the streams that join it.
pub(crate) fn executor() -> (StreamExecutor, Joining) {
    let shared = Arc::new(Shared::default());
    (
        StreamExecutor {
            shared: shared.clone(),
        },
        Joining { shared },
    )
}

/// The connection's end of a [`StreamExecutor`].
pub(crate) struct Joining {
    shared: Arc<Shared>,
}

impl Joining {
    /// The connection's future, with the streams that join run inside it.
    pub(crate) fn with<C: Future>(self, connection: C) -> Connection<C> {
        Connection {
            connection: Box::pin(connection),
            shared: self.shared,
            streams: Vec::new(),
            free: Vec::new(),
            sweep: Vec::new(),
        }
    }
}

/// A connection future with the streams that joined it (see the module docs).
pub(crate) struct Connection<C> {
    connection: Pin<Box<C>>,
    shared: Arc<Shared>,
    /// The joined streams by slot; a slot is reused once its stream ends.
    streams: Vec<Option<Joined>>,
    free: Vec<usize>,
    /// The slots taken from the inbox for one sweep (kept to reuse its allocation).
    sweep: Vec<usize>,
}

/// A joined stream and the waker it is polled with.
struct Joined {
    stream: Stream,
    wake: Arc<StreamWaker>,
    waker: Waker,
}

/// One joined stream's waker: queues the stream for the connection's next sweep.
struct StreamWaker {
    slot: usize,
    /// Already queued: an event wakes each of a connection's watchers once, but h2 also wakes
    /// a stream when it grants it capacity and when its frames are written.
    queued: AtomicBool,
    shared: Arc<Shared>,
}

impl Wake for StreamWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            self.shared.inbox().woken.push(self.slot);
            self.shared.notify();
        }
    }
}

impl<C> Connection<C> {
    /// Take in a stream that joined, queued for the next sweep (its wakers still name the task
    /// it left).
    fn admit(&mut self, stream: Stream) {
        let slot = self.free.pop().unwrap_or(self.streams.len());
        let wake = Arc::new(StreamWaker {
            slot,
            queued: AtomicBool::new(true),
            shared: self.shared.clone(),
        });
        let joined = Joined {
            stream,
            waker: Waker::from(wake.clone()),
            wake,
        };
        if slot == self.streams.len() {
            self.streams.push(Some(joined));
        } else {
            self.streams[slot] = Some(joined);
        }
        self.sweep.push(slot);
    }

    /// Take in the streams that joined and poll, once, each stream woken since the last sweep.
    /// h2 wakes a stream when it grants the capacity the stream just asked for, and again when
    /// the connection writes the stream's frames: both come for one event, and are answered by
    /// one poll in the next sweep (a stream already queued is not queued twice).
    fn sweep(&mut self) {
        if !self.shared.pending.swap(false, Ordering::AcqRel) {
            return;
        }
        let joining = {
            let mut inbox = self.shared.inbox();
            std::mem::swap(&mut self.sweep, &mut inbox.woken);
            std::mem::take(&mut inbox.joining)
        };
        for stream in joining {
            self.admit(stream);
        }
        for i in 0..self.sweep.len() {
            let slot = self.sweep[i];
            let Some(joined) = self.streams[slot].as_mut() else {
                continue;
            };
            joined.wake.queued.store(false, Ordering::Release);
            let mut cx = Context::from_waker(&joined.waker);
            if joined.stream.as_mut().poll(&mut cx).is_ready() {
                self.streams[slot] = None;
                self.free.push(slot);
            }
        }
        self.sweep.clear();
    }
}

impl<C: Future> Future for Connection<C> {
    type Output = C::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let this = &mut *self;
        this.shared.task.register(cx.waker());
        // The streams first, so that the connection writes all their frames in the same pass.
        // Each returns once it has nothing more to send; none is cut short by tokio's per-task
        // budget, which counts every watcher's channel read as a step and would otherwise split
        // one event's sweep into many. What a sweep wakes again waits for the next poll, which
        // the wake-up brings, after the connection has written this sweep's frames.
        let sweep = tokio::task::coop::unconstrained(std::future::poll_fn(|_| {
            this.sweep();
            Poll::Ready(())
        }));
        let _ = std::pin::pin!(sweep).poll(cx);
        // When the connection ends, the streams still in it end with it (dropped): their
        // client is gone, as hyper's own stream tasks find on their next write.
        this.connection.as_mut().poll(cx)
    }
}

impl<C> Drop for Connection<C> {
    fn drop(&mut self) {
        let joining = {
            let mut inbox = self.shared.inbox();
            inbox.closed = true;
            std::mem::take(&mut inbox.joining)
        };
        // Dropped outside the lock: a stream's drop may wake others.
        drop(joining);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Executor;
    use std::time::Duration;
    use tokio::sync::{mpsc, oneshot, watch};

    /// What a stream reports each time it runs: whether it asks to join, and in which task.
    type Seen = (bool, tokio::task::Id);

    /// Tells when it is dropped.
    struct Dropped(Option<oneshot::Sender<()>>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            if let Some(tx) = self.0.take() {
                let _ = tx.send(());
            }
        }
    }

    async fn next(seen: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
        tokio::time::timeout(Duration::from_secs(10), seen.recv())
            .await
            .expect("the stream ran")
            .expect("open")
    }

    /// Two streams of one connection, one asking to join, both run on every tick.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stream_that_asks_runs_in_its_connections_task_until_the_connection_ends() {
        let (executor, joining) = executor();
        let (end, ended) = oneshot::channel::<()>();
        let connection = tokio::spawn(joining.with(async move {
            let _ = ended.await;
        }));
        let (tick, ticks) = watch::channel(0u32);
        let (report, mut seen) = mpsc::unbounded_channel::<Seen>();
        let (dropped_tx, dropped) = oneshot::channel();
        let mut dropped_tx = Some(dropped_tx);
        for join in [true, false] {
            let (report, mut ticks) = (report.clone(), ticks.clone());
            let guard = join.then(|| Dropped(dropped_tx.take()));
            executor.execute(async move {
                let _guard = guard;
                loop {
                    if join {
                        join_connection();
                    }
                    report.send((join, tokio::task::id())).unwrap();
                    if ticks.changed().await.is_err() {
                        return;
                    }
                }
            });
        }
        let mut first = [next(&mut seen).await, next(&mut seen).await];
        first.sort_by_key(|s| s.0);
        let [(false, own), (true, started_in)] = first else {
            panic!("{first:?}")
        };
        assert_ne!(
            started_in,
            connection.id(),
            "every stream starts in a task of its own"
        );
        for round in 1..=3 {
            tick.send(round).unwrap();
            let mut now = [next(&mut seen).await, next(&mut seen).await];
            now.sort_by_key(|s| s.0);
            assert_eq!(
                now,
                [(false, own), (true, connection.id())],
                "round {round}"
            );
        }
        // The connection ends: the stream in it is dropped with it; the other goes on.
        end.send(()).unwrap();
        connection.await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), dropped)
            .await
            .expect("dropped in time")
            .expect("dropped, not leaked");
        tick.send(4).unwrap();
        assert_eq!(next(&mut seen).await, (false, own));
    }
}
