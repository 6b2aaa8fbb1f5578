//! Reused buffers for the chunks of large list bodies.
//!
//! A LIST of 10k ConfigMaps is ~170 chunks of 64 KiB, each filled once, written to the socket
//! and dropped. Fresh from the allocator, every chunk's pages are faulted in and zeroed by the
//! kernel, then handed back to it when glibc trims its heap. Here a chunk's allocation is used
//! again once the bytes sent from it are dropped, so a steady stream of lists touches the same
//! few warm pages. Measured with `kcache bench --scenarios list` (2026-11-27, four before/after
//! pairs on 2 cores): 10k ConfigMaps at RV=0 went from a median of 124 to 175 lists a second,
//! at less CPU per list; the protobuf list bodies gained nothing measurable and do not use it.
//!
//! Pages are written the same way ([`Chunks`]): a Table page of 500 Pods is ~1.6 MB, and
//! built whole it was one allocation of that size per page (a JSON page's grew by doubling,
//! copying itself each time). In front of 5,000 nodes, the users' namespace LIST p99 was
//! 345–512 ms in four runs with pages in chunks, 436–601 ms in three without on the same day
//! (BENCHMARKS.md, "Pages written in pooled chunks").
//!
//! A chunk is written in a plain `Vec`, and sent as [`Bytes`] that own it
//! ([`Bytes::from_owner`]): when the last of those bytes is dropped (written to the socket),
//! the `Vec` comes back here, emptied. The pool is process-wide, as the allocator it stands in
//! front of is: it holds no data between uses, only capacity, and at most [`KEPT`] buffers.

use std::sync::Mutex;

use bytes::Bytes;

/// The buffers kept for reuse: enough for every list being written at once to find one (a
/// page is ~25 chunks, hyper queues a few chunks per connection), few enough that the idle
/// pool costs at most ~8 MiB.
const KEPT: usize = 128;

/// The largest buffer kept: the list bodies' chunks, 64 KiB and a margin.
const KEPT_LEN: usize = 128 * 1024;

/// The room a chunk's buffer has past the chunk's size, for the item that crosses it.
pub(crate) const MARGIN: usize = 4096;

/// The process's pool, used by the list bodies.
static SHARED: ChunkPool = ChunkPool::new();

/// An empty buffer with room for at least `capacity` bytes, from the process's pool.
pub(crate) fn take(capacity: usize) -> Vec<u8> {
    SHARED.take(capacity)
}

/// `buf`'s bytes, to send; its allocation comes back to the process's pool once they are
/// dropped.
pub(crate) fn finish(buf: Vec<u8>) -> Bytes {
    SHARED.finish(buf)
}

/// A body written in chunks of about `chunk` bytes from the pool: before each item, call
/// [`Chunks::room_for`] with about how long it is, then write it into [`Chunks::buf`]. An
/// item is never split: a chunk goes out once it reached its size, or before an item that
/// would outgrow its buffer (a grown buffer is a copy, and too large to be kept).
pub(crate) struct Chunks {
    chunk: usize,
    done: Vec<Bytes>,
    buf: Vec<u8>,
}

impl Chunks {
    pub(crate) fn new(chunk: usize) -> Chunks {
        Chunks {
            chunk,
            done: Vec::new(),
            buf: take(chunk + MARGIN),
        }
    }

    /// Where the next bytes go.
    pub(crate) fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Before an item of about `len` bytes: the chunk so far goes out if it is full or the
    /// item would not fit in its buffer.
    pub(crate) fn room_for(&mut self, len: usize) {
        let full = self.buf.len() >= self.chunk || self.buf.len() + len > self.buf.capacity();
        if full && !self.buf.is_empty() {
            let next = std::mem::replace(&mut self.buf, take(self.chunk + MARGIN));
            self.done.push(finish(next));
        }
    }

    /// The body's chunks, in order.
    pub(crate) fn finish(mut self) -> Vec<Bytes> {
        if !self.buf.is_empty() || self.done.is_empty() {
            self.done.push(finish(self.buf));
        }
        self.done
    }
}

/// Emptied buffers, each free to be written again.
struct ChunkPool {
    free: Mutex<Vec<Vec<u8>>>,
}

impl ChunkPool {
    const fn new() -> Self {
        ChunkPool {
            free: Mutex::new(Vec::new()),
        }
    }

    fn take(&self, capacity: usize) -> Vec<u8> {
        if capacity <= KEPT_LEN {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(i) = free.iter().rposition(|b| b.capacity() >= capacity) {
                return free.swap_remove(i);
            }
        }
        Vec::with_capacity(capacity)
    }

    fn finish(&'static self, buf: Vec<u8>) -> Bytes {
        // A buffer that grew past what is kept (one item larger than a chunk) is not owned by
        // the pool: it would hold that large allocation for good.
        if buf.capacity() > KEPT_LEN {
            return Bytes::from(buf);
        }
        Bytes::from_owner(Returned { buf, pool: self })
    }

    fn give_back(&self, mut buf: Vec<u8>) {
        buf.clear();
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        if free.len() < KEPT {
            free.push(buf);
        }
    }
}

/// A chunk's buffer while its bytes are being sent; back to its pool when they are dropped.
struct Returned {
    buf: Vec<u8>,
    pool: &'static ChunkPool,
}

impl AsRef<[u8]> for Returned {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Returned {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool of the test's own that lives as long as `'static` needs: leaked, a few bytes.
    fn pool() -> &'static ChunkPool {
        Box::leak(Box::new(ChunkPool::new()))
    }

    #[test]
    fn a_chunk_is_reused_only_once_its_bytes_are_dropped() {
        let pool = pool();
        let mut buf = pool.take(4096);
        buf.extend_from_slice(b"first");
        let at = buf.as_ptr();
        let sent = pool.finish(buf);
        let copy = sent.clone();
        assert_eq!(&sent[..], b"first");
        // Still referenced: a new allocation, and the sent bytes stay as they were.
        let mut other = pool.take(4096);
        assert_ne!(other.as_ptr(), at);
        other.extend_from_slice(b"second");
        assert_eq!(&sent[..], b"first");
        let second = pool.finish(other);
        drop(sent);
        assert_eq!(&copy[..], b"first", "a clone keeps the chunk");
        drop(copy);
        // Every reference dropped: the first allocation comes back, empty.
        let again = pool.take(4096);
        assert_eq!(again.as_ptr(), at);
        assert!(again.is_empty() && again.capacity() >= 4096);
        drop(second);
    }

    #[test]
    fn the_pool_keeps_a_bounded_number_of_buffers() {
        let pool = pool();
        let sent: Vec<Bytes> = (0..KEPT * 2)
            .map(|_| {
                let mut b = pool.take(16);
                b.extend_from_slice(b"x");
                pool.finish(b)
            })
            .collect();
        drop(sent);
        assert_eq!(pool.free.lock().unwrap().len(), KEPT);
    }

    #[test]
    fn a_chunk_that_grew_large_is_not_kept() {
        let pool = pool();
        let mut b = pool.take(16);
        b.extend_from_slice(&vec![0; KEPT_LEN + 1]);
        drop(pool.finish(b));
        assert!(pool.free.lock().unwrap().is_empty());
    }

    #[test]
    fn chunks_end_between_items_once_full() {
        let mut c = Chunks::new(10);
        for item in [&b"abcdef"[..], b"ghijkl", b"mn", b"o"] {
            c.room_for(item.len());
            c.buf().extend_from_slice(item);
        }
        let chunks = c.finish();
        let parts: Vec<&[u8]> = chunks.iter().map(|b| &b[..]).collect();
        assert_eq!(parts, [&b"abcdefghijkl"[..], b"mno"]);
        // Nothing written: one empty chunk, a body all the same.
        assert_eq!(Chunks::new(10).finish(), [Bytes::new()]);
    }

    #[test]
    fn an_item_that_would_outgrow_the_buffer_starts_a_chunk() {
        let mut c = Chunks::new(10);
        // Larger than any buffer the pool hands out (the process's pool is shared by the
        // tests running at once, and may hand out a larger one than asked for).
        let large = vec![b'x'; KEPT_LEN + 1];
        for item in [&b"ab"[..], &large, b"c"] {
            c.room_for(item.len());
            c.buf().extend_from_slice(item);
        }
        let chunks = c.finish();
        let lens: Vec<usize> = chunks.iter().map(Bytes::len).collect();
        // The large item alone outgrows a buffer: its own chunk, the next item after it.
        assert_eq!(lens, [2, KEPT_LEN + 1, 1]);
    }
}
