//! A watch's response body that runs the watcher itself.
//!
//! The watcher's loop is an async function that hands out chunks with [`Outlet::send`]. It
//! is not a task of its own: the body polls it, so it runs in the task that writes the
//! response (hyper's connection task on HTTP/1.1; on HTTP/2 the stream's task, then, once the
//! watcher waits for changes, the connection's: see `conn_task`), and only when that task wants
//! more bytes. Compared with a watcher task feeding a channel this saves, per delivered event,
//! one task wake-up and a channel hand-off, which is most of kcache's CPU per delivery at 10k
//! watchers (docs/benchmarks.md). It also gives backpressure for free: a
//! client that stops reading stops its body being polled, so its watcher stops too and pins
//! no more than what hyper has queued; and a client that leaves drops the body, which drops
//! the watcher at once.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;
use futures::task::AtomicWaker;
use futures::Stream;

/// The watcher's end: where its loop puts the next chunk.
pub(super) struct Outlet {
    slot: Arc<Mutex<Option<Bytes>>>,
}

impl Outlet {
    /// Hand one chunk to the body and pause until the body is polled again (that is, until
    /// the connection has taken the chunk and asks for more).
    pub(super) async fn send(&self, chunk: Bytes) {
        *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(chunk);
        Paused(false).await
    }
}

/// Pending once (without asking to be woken: the body returns the chunk instead, and its
/// caller polls again when it wants the next), then ready.
struct Paused(bool);

impl Future for Paused {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

/// The body: the watcher's loop and the chunk it last handed out.
pub(super) struct WatchBody {
    run: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    slot: Arc<Mutex<Option<Bytes>>>,
    /// The waker the loop is polled with, and whether it was woken (see [`Woken`]).
    woken: Arc<Woken>,
    waker: Waker,
    /// The loop paused at [`Outlet::send`] (or was never polled): the next poll resumes it.
    resume: bool,
}

/// The loop's own waker: it notes the wake-up, then wakes whoever polled the body last.
///
/// The task that polls a body is woken for other reasons too: on HTTP/2, h2 wakes a stream's
/// task when it grants the stream capacity and again when the stream's frames are written,
/// twice per delivered event. Polling the watcher's loop on those would run its whole wait
/// (the cache's change signal, the timer, the shutdown signal) for nothing; with this waker
/// the body answers them at the cost of one flag.
struct Woken {
    flag: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.flag.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl WatchBody {
    /// A body that runs the loop `make` builds around an [`Outlet`]; the stream ends when the
    /// loop returns.
    pub(super) fn new<F, Fut>(make: F) -> WatchBody
    where
        F: FnOnce(Outlet) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let slot = Arc::new(Mutex::new(None));
        let run = make(Outlet { slot: slot.clone() });
        let woken = Arc::new(Woken {
            flag: AtomicBool::new(false),
            task: AtomicWaker::new(),
        });
        WatchBody {
            run: Some(Box::pin(run)),
            slot,
            waker: Waker::from(woken.clone()),
            woken,
            resume: true,
        }
    }

    fn take(&self) -> Option<Bytes> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl Stream for WatchBody {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let Some(run) = this.run.as_mut() else {
            return Poll::Ready(None);
        };
        // Registered before the flag is read: a wake-up in between finds this task.
        this.woken.task.register(cx.waker());
        let woken = this.woken.flag.swap(false, Ordering::AcqRel);
        if !std::mem::take(&mut this.resume) && !woken {
            return Poll::Pending;
        }
        let finished = run
            .as_mut()
            .poll(&mut Context::from_waker(&this.waker))
            .is_ready();
        if finished {
            this.run = None;
        }
        match this.take() {
            Some(chunk) => {
                this.resume = true;
                Poll::Ready(Some(Ok(chunk)))
            }
            None if finished => Poll::Ready(None),
            None => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn yields_each_chunk_in_order_and_ends_with_the_loop() {
        let body = WatchBody::new(|out| async move {
            out.send(Bytes::from_static(b"a")).await;
            tokio::task::yield_now().await;
            out.send(Bytes::from_static(b"b")).await;
        });
        let got: Vec<Bytes> = body.map(|c| c.unwrap()).collect().await;
        assert_eq!(
            got,
            vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")]
        );
    }

    #[tokio::test]
    async fn the_loop_runs_only_as_far_as_the_reader_reads() {
        let reached = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let r = reached.clone();
        let mut body = WatchBody::new(|out| async move {
            for i in 0..10u8 {
                r.store(i as usize, std::sync::atomic::Ordering::SeqCst);
                out.send(Bytes::from(vec![i])).await;
            }
        });
        assert_eq!(body.next().await.unwrap().unwrap(), Bytes::from(vec![0u8]));
        assert_eq!(body.next().await.unwrap().unwrap(), Bytes::from(vec![1u8]));
        // Nothing past the second chunk was produced while nobody asked for it.
        assert_eq!(reached.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// The task polling a body is also woken for reasons of its own (h2 grants a stream
    /// capacity, writes its frames); those polls must not run the watcher's loop.
    #[tokio::test]
    async fn only_the_loops_own_wake_ups_run_it() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

        // The loop counts its polls; each event waits for the signal.
        let polls = Arc::new(AtomicUsize::new(0));
        let signal = Arc::new(tokio::sync::Notify::new());
        let (p, s) = (polls.clone(), signal.clone());
        let mut body = WatchBody::new(|out| async move {
            loop {
                let notified = s.notified();
                tokio::pin!(notified);
                std::future::poll_fn(|cx| {
                    p.fetch_add(1, SeqCst);
                    notified.as_mut().poll(cx)
                })
                .await;
                out.send(Bytes::from_static(b"event")).await;
            }
        });
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        for _ in 0..3 {
            assert!(Pin::new(&mut body).poll_next(&mut cx).is_pending());
        }
        assert_eq!(polls.load(SeqCst), 1, "polled for nothing");
        signal.notify_one();
        assert!(matches!(
            Pin::new(&mut body).poll_next(&mut cx),
            Poll::Ready(Some(Ok(_)))
        ));
        // Resumed after handing out the chunk, then waiting again.
        assert!(Pin::new(&mut body).poll_next(&mut cx).is_pending());
        assert!(Pin::new(&mut body).poll_next(&mut cx).is_pending());
        assert_eq!(polls.load(SeqCst), 3);
    }
}
