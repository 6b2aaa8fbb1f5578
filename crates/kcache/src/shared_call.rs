//! One upstream call's answer shared by every caller that asked for it before it was sent.
//!
//! Consistent reads ask the upstream for answers that hold only as of after the read arrived:
//! its current revision (`upstream::RevisionProbe`), a quiet type's metadata list that proves
//! the cache current (`api::proof`), or the read itself where kcache forwards it
//! (`api::shared_read`). An answer to a call sent after a reader arrived serves that reader,
//! and every other reader that arrived before the same call was sent, as well as a call of
//! its own would. So readers that arrive while calls are out wait together for the next call
//! instead of each sending one: under load the upstream serves a few such calls per round
//! trip, whatever the read rate.
//!
//! At most [`IN_FLIGHT`] calls of one kind are out at once. With one, every reader would wait
//! for the call in flight to return and then for its own (1.5 round trips on average); with
//! two, a reader arriving while one is out sends its own at once, and one arriving while both
//! are waits about a quarter of a round trip for a slot (1.25 round trips).
//!
//! A call is made by one of the readers it answers, the *leader*, in its own task: a reader
//! that finds a slot free leads a call of its own at once, with nothing handed between tasks.
//! When a call ends, its leader hands the readers that queued meanwhile to one of them, which
//! leads their call. A leader that goes away before its call is answered (its client left)
//! hands its waiting readers on the same way, so none of them is left waiting.

use std::future::Future;
use std::sync::Mutex;

use tokio::sync::oneshot;

/// Calls of one kind out at once (see the module docs).
pub(crate) const IN_FLIGHT: usize = 2;

/// Readers waiting for the next call of one kind, and the calls out.
pub(crate) struct SharedCalls<T> {
    state: Mutex<State<T>>,
}

type Waiter<T> = oneshot::Sender<Message<T>>;

struct State<T> {
    /// Calls out (led), at most [`IN_FLIGHT`].
    out: usize,
    /// Readers that queued since the last call was sent.
    waiting: Vec<Waiter<T>>,
}

/// What a waiting reader is sent.
enum Message<T> {
    /// The answer of the call it waited for.
    Answer(T),
    /// Lead the call of these readers (the ones that queued with it).
    Lead(Vec<Waiter<T>>),
}

/// A reader's turn: lead a call, or the answer of one led by another.
pub(crate) enum Turn<'a, T> {
    /// Make the call, answer [`Leader::shares`] readers with [`Leader::finish`].
    Lead(Leader<'a, T>),
    /// The answer of a call sent after this reader arrived.
    Answer(T),
}

/// The reader that makes a call, with the readers waiting for its answer. Dropped without
/// [`Leader::finish`], it hands them to one of them, which leads their call instead.
pub(crate) struct Leader<'a, T> {
    calls: &'a SharedCalls<T>,
    batch: Vec<Waiter<T>>,
}

impl<T> Default for SharedCalls<T> {
    fn default() -> Self {
        SharedCalls {
            state: Mutex::new(State {
                out: 0,
                waiting: Vec::new(),
            }),
        }
    }
}

impl<T> std::fmt::Debug for SharedCalls<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.lock();
        f.debug_struct("SharedCalls")
            .field("out", &st.out)
            .field("waiting", &st.waiting.len())
            .finish()
    }
}

impl<T> SharedCalls<T> {
    /// This reader's turn: to lead a call at once when a slot is free, else to wait for the
    /// next call, sent after it arrived.
    pub(crate) async fn turn(&self) -> Turn<'_, T> {
        let rx = {
            let mut st = self.lock();
            if st.out < IN_FLIGHT && st.waiting.is_empty() {
                st.out += 1;
                return Turn::Lead(self.leader(Vec::new()));
            }
            let (tx, rx) = oneshot::channel();
            st.waiting.push(tx);
            rx
        };
        match rx.await {
            Ok(Message::Answer(answer)) => Turn::Answer(answer),
            Ok(Message::Lead(batch)) => Turn::Lead(self.leader(batch)),
            // Every waiter is answered or handed the lead before it is dropped; only a
            // dropped `SharedCalls` (its owner gone) drops one unanswered. Lead alone then,
            // in a slot of one's own.
            Err(_) => {
                self.lock().out += 1;
                Turn::Lead(self.leader(Vec::new()))
            }
        }
    }

    /// The answer of a call sent after now, shared with every reader that queues before it is
    /// sent: `call` is made by this reader or by another that waited with it.
    pub(crate) async fn join<Fut>(&self, call: impl FnOnce() -> Fut) -> T
    where
        T: Clone,
        Fut: Future<Output = T>,
    {
        match self.turn().await {
            Turn::Answer(answer) => answer,
            Turn::Lead(leader) => {
                let answer = call().await;
                leader.finish(&answer);
                answer
            }
        }
    }

    /// Whether no call is out and no reader waits (nothing would be lost if this were
    /// dropped now).
    pub(crate) fn is_idle(&self) -> bool {
        let st = self.lock();
        st.out == 0 && st.waiting.is_empty()
    }

    fn leader(&self, batch: Vec<Waiter<T>>) -> Leader<'_, T> {
        Leader { calls: self, batch }
    }

    /// A call's slot is free: hand the lead to one reader of `batch` (its call's readers, not
    /// answered), else to one of the readers queued meanwhile, else give the slot back.
    fn pass_on(&self, mut batch: Vec<Waiter<T>>) {
        loop {
            while !batch.is_empty() {
                // The earliest to arrive leads; a reader that left meanwhile is skipped.
                let next = batch.remove(0);
                match next.send(Message::Lead(std::mem::take(&mut batch))) {
                    Ok(()) => return,
                    Err(Message::Lead(rest)) => batch = rest,
                    Err(Message::Answer(_)) => {}
                }
            }
            let mut st = self.lock();
            if st.waiting.is_empty() {
                st.out -= 1;
                return;
            }
            batch = std::mem::take(&mut st.waiting);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        // Every update is one push, one swap or one count: a poisoned lock is still
        // consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T> Leader<'_, T> {
    /// Whether other readers wait for this call's answer.
    pub(crate) fn shares(&self) -> bool {
        !self.batch.is_empty()
    }

    /// The call was answered: every reader that waited for it gets `answer`, and the slot
    /// goes to the readers queued meanwhile.
    pub(crate) fn finish(mut self, answer: &T)
    where
        T: Clone,
    {
        for w in self.batch.drain(..) {
            let _ = w.send(Message::Answer(answer.clone()));
        }
    }
}

impl<T> Drop for Leader<'_, T> {
    fn drop(&mut self) {
        // Finished: the batch is empty and the slot goes on to the queue. Not finished (the
        // leader's reader went away): its readers lead their own call.
        self.calls.pass_on(std::mem::take(&mut self.batch));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tokio::sync::Semaphore;

    /// A call that counts itself in `sent` and returns its number once `gate` lets it.
    async fn counted(sent: &AtomicUsize, gate: &Semaphore) -> usize {
        let n = sent.fetch_add(1, Ordering::SeqCst) + 1;
        gate.acquire().await.unwrap().forget();
        n
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

    struct Bench {
        calls: Arc<SharedCalls<usize>>,
        sent: Arc<AtomicUsize>,
        gate: Arc<Semaphore>,
    }

    impl Bench {
        fn new(permits: usize) -> Bench {
            Bench {
                calls: Arc::default(),
                sent: Arc::default(),
                gate: Arc::new(Semaphore::new(permits)),
            }
        }

        /// A reader in a task of its own.
        fn reader(&self) -> tokio::task::JoinHandle<usize> {
            let (calls, sent, gate) = (self.calls.clone(), self.sent.clone(), self.gate.clone());
            tokio::spawn(async move { calls.join(|| counted(&sent, &gate)).await })
        }
    }

    #[tokio::test]
    async fn readers_that_queue_together_share_one_call() {
        let b = Bench::new(0);
        // Both slots taken; the next eight queue and share the third call.
        let (first, second) = (b.reader(), b.reader());
        sent_at_least(&b.sent, 2).await;
        let queued: Vec<_> = (0..8).map(|_| b.reader()).collect();
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            b.sent.load(Ordering::SeqCst),
            IN_FLIGHT,
            "no third call yet"
        );
        b.gate.add_permits(1);
        assert_eq!(first.await.unwrap(), 1);
        sent_at_least(&b.sent, 3).await;
        b.gate.add_permits(2);
        assert_eq!(second.await.unwrap(), 2);
        for q in queued {
            assert_eq!(q.await.unwrap(), 3);
        }
        assert_eq!(b.sent.load(Ordering::SeqCst), 3);
        assert!(b.calls.is_idle());
    }

    #[tokio::test]
    async fn a_reader_alone_leads_its_own_call() {
        let b = Bench::new(10);
        for i in 1..=3 {
            assert_eq!(b.reader().await.unwrap(), i);
        }
        assert!(b.calls.is_idle());
    }

    #[tokio::test]
    async fn a_leader_that_leaves_hands_its_readers_on() {
        let b = Bench::new(0);
        let (_first, second) = (b.reader(), b.reader());
        sent_at_least(&b.sent, 2).await;
        let (third, fourth) = (b.reader(), b.reader());
        // The first call ends and hands the queue (third, fourth) to the third, which sends
        // the third call; then the third's reader leaves before its answer.
        b.gate.add_permits(1);
        sent_at_least(&b.sent, 3).await;
        third.abort();
        assert!(third.await.unwrap_err().is_cancelled());
        // The fourth leads a call of its own, sent after it arrived.
        sent_at_least(&b.sent, 4).await;
        b.gate.add_permits(2);
        assert_eq!(second.await.unwrap(), 2);
        assert_eq!(fourth.await.unwrap(), 4);
        assert!(b.calls.is_idle());
    }
}
