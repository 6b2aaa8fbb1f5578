//! One upstream call's answer shared by every caller that asked for it before it was sent.
//!
//! Consistent reads ask the upstream for facts that hold only as of after the read arrived:
//! its current revision (`upstream::RevisionProbe`), or a quiet type's metadata list that
//! proves the cache current (`api::proof`). An answer to a call sent after a reader arrived
//! serves that reader, and every other reader that arrived before the same call was sent, as
//! well as a call of its own would. So readers that arrive while calls are out join the next
//! call instead of each sending one: under load the upstream serves a few such calls per
//! round trip, whatever the read rate.
//!
//! At most [`IN_FLIGHT`] calls of one kind are out at once. With one, every reader would wait
//! for the call in flight to return and then for its own (1.5 round trips on average); with
//! two, a reader arriving while one is out gets its own at once, and one arriving while both
//! are waits about a quarter of a round trip for a slot (1.25 round trips).

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// Calls of one kind out at once (see the module docs).
pub const IN_FLIGHT: usize = 2;

/// Callers waiting for the next call of one kind, and the calls out.
pub struct SharedCalls<T> {
    state: Arc<Mutex<State<T>>>,
}

struct State<T> {
    /// Loops sending calls (at most [`IN_FLIGHT`]).
    senders: usize,
    /// Callers that joined since the last call was sent.
    waiting: Vec<oneshot::Sender<T>>,
}

impl<T> std::fmt::Debug for SharedCalls<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = lock(&self.state);
        f.debug_struct("SharedCalls")
            .field("out", &st.senders)
            .field("waiting", &st.waiting.len())
            .finish()
    }
}

impl<T> Default for SharedCalls<T> {
    fn default() -> Self {
        SharedCalls {
            state: Arc::new(Mutex::new(State {
                senders: 0,
                waiting: Vec::new(),
            })),
        }
    }
}

impl<T: Clone + Send + 'static> SharedCalls<T> {
    /// The answer of a call sent after now, shared with every caller that joins before that
    /// call is sent. When fewer than [`IN_FLIGHT`] calls are out, `call` is run in a task of
    /// its own, once per batch of waiting callers until none is left: a caller that goes
    /// away does not cancel the call the others wait on. None when that task ended without an
    /// answer (the runtime is shutting down).
    pub async fn join<F, Fut>(&self, mut call: F) -> Option<T>
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut st = lock(&self.state);
            st.waiting.push(tx);
            let start = st.senders < IN_FLIGHT;
            if start {
                st.senders += 1;
            }
            start
        };
        if start {
            let state = self.state.clone();
            tokio::spawn(async move {
                // Taken before the call is made: every caller in it joined before it was sent.
                while let Some(batch) = next_batch(&state) {
                    let answer = call().await;
                    for w in batch {
                        let _ = w.send(answer.clone());
                    }
                }
            });
        }
        rx.await.ok()
    }
}

/// The callers waiting now, or None (and one sender fewer) when there are none.
fn next_batch<T>(state: &Mutex<State<T>>) -> Option<Vec<oneshot::Sender<T>>> {
    let mut st = lock(state);
    if st.waiting.is_empty() {
        st.senders -= 1;
        return None;
    }
    Some(std::mem::take(&mut st.waiting))
}

fn lock<T>(state: &Mutex<State<T>>) -> std::sync::MutexGuard<'_, State<T>> {
    // Every update is one push or one swap: a poisoned lock is still consistent.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A call that counts itself and returns its number once `gate` opens.
    fn counted(
        sent: Arc<AtomicUsize>,
        gate: Arc<tokio::sync::Semaphore>,
    ) -> impl FnMut() -> std::pin::Pin<Box<dyn Future<Output = usize> + Send>> + Send + 'static
    {
        move || {
            let (sent, gate) = (sent.clone(), gate.clone());
            Box::pin(async move {
                let n = sent.fetch_add(1, Ordering::SeqCst) + 1;
                gate.acquire().await.unwrap().forget();
                n
            })
        }
    }

    #[tokio::test]
    async fn callers_that_arrive_together_share_one_call() {
        let calls = Arc::new(SharedCalls::default());
        let sent = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Semaphore::new(100));
        let joins = (0..8).map(|_| calls.join(counted(sent.clone(), gate.clone())));
        let answers = futures::future::join_all(joins).await;
        assert_eq!(sent.load(Ordering::SeqCst), 1);
        assert!(answers.iter().all(|a| *a == Some(1)), "{answers:?}");
    }

    /// Wait until `n` calls were sent (a test fails after 10 s rather than hangs).
    async fn sent_at_least(sent: &AtomicUsize, n: usize) {
        let reached = async {
            while sent.load(Ordering::SeqCst) < n {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), reached)
            .await
            .unwrap_or_else(|_| panic!("{n} calls sent"));
    }

    type Joined = tokio::task::JoinHandle<Option<usize>>;

    /// A caller in a task of its own, whose call counts itself in `sent` and waits on `gate`.
    fn caller(
        calls: &Arc<SharedCalls<usize>>,
        sent: &Arc<AtomicUsize>,
        gate: &Arc<tokio::sync::Semaphore>,
    ) -> Joined {
        let (calls, call) = (calls.clone(), counted(sent.clone(), gate.clone()));
        tokio::spawn(async move { calls.join(call).await })
    }

    #[tokio::test]
    async fn a_caller_joins_only_a_call_not_yet_sent() {
        let calls = Arc::new(SharedCalls::default());
        let sent = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        // Two calls go out at once; a third caller waits for a slot, and a fourth joins it.
        let first = caller(&calls, &sent, &gate);
        sent_at_least(&sent, 1).await;
        let second = caller(&calls, &sent, &gate);
        sent_at_least(&sent, 2).await;
        let (third, fourth) = (caller(&calls, &sent, &gate), caller(&calls, &sent, &gate));
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(sent.load(Ordering::SeqCst), IN_FLIGHT, "no third call yet");
        gate.add_permits(1);
        assert_eq!(first.await.unwrap(), Some(1));
        sent_at_least(&sent, 3).await;
        gate.add_permits(2);
        assert_eq!(second.await.unwrap(), Some(2));
        assert_eq!(third.await.unwrap(), Some(3));
        assert_eq!(fourth.await.unwrap(), Some(3));
        assert_eq!(sent.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_caller_that_leaves_does_not_cancel_the_call() {
        let calls = Arc::new(SharedCalls::default());
        let sent = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let leaving = caller(&calls, &sent, &gate);
        sent_at_least(&sent, 1).await;
        let _second = caller(&calls, &sent, &gate);
        sent_at_least(&sent, 2).await;
        let waiting = caller(&calls, &sent, &gate);
        leaving.abort();
        // The first call ends although its caller left, and its loop sends the waiting
        // caller's call while the second is still out.
        gate.add_permits(1);
        sent_at_least(&sent, 3).await;
        gate.add_permits(2);
        assert_eq!(waiting.await.unwrap(), Some(3));
    }
}
