//! Counting the allocations of one piece of code on one thread (the `protobuf` scenario's
//! client decode rows: what a client pays to decode a list as JSON or as protobuf).
//!
//! [`Counting`] is the `kcache` binary's global allocator when it is built with the bench. It
//! passes everything to the system allocator and counts only on a thread inside [`count`], so
//! the cost elsewhere (the kcache child runs the same binary) is one thread-local read per
//! allocation.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    /// (counting on this thread, allocations, bytes asked for).
    static COUNTS: Cell<(bool, u64, u64)> = const { Cell::new((false, 0, 0)) };
}

/// The system allocator, counting on threads inside [`count`].
pub struct Counting;

fn note(size: usize) {
    // `try_with`: a thread being torn down has no thread-locals any more, and still frees.
    let _ = COUNTS.try_with(|c| {
        let (on, n, bytes) = c.get();
        if on {
            c.set((on, n + 1, bytes + size as u64));
        }
    });
}

// SAFETY: every call is passed unchanged to `System`, which upholds `GlobalAlloc`'s contract;
// the counting touches only a thread-local `Cell` and never allocates.
// A global allocator can only be written as an `unsafe impl`; this one is sound for the
// reason above, and nothing else in the crate may use unsafe code (`#![deny]` in lib.rs).
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's guarantees for `layout` are `System::alloc`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation goes there).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as `dealloc` for `ptr` and `layout`; `new_size` is the caller's to uphold.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// What [`count`] saw: allocations (a realloc counts as one) and the bytes they asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Allocations {
    pub count: u64,
    pub bytes: u64,
}

/// Run `f`, counting this thread's allocations meanwhile. Zero when the binary's global
/// allocator is not [`Counting`] (as in unit tests).
pub fn count<T>(f: impl FnOnce() -> T) -> (T, Allocations) {
    COUNTS.with(|c| c.set((true, 0, 0)));
    let out = f();
    let (_, count, bytes) = COUNTS.with(|c| c.replace((false, 0, 0)));
    (out, Allocations { count, bytes })
}
