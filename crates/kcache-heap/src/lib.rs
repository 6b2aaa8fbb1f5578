//! Giving memory back to the operating system once kcache has freed a large part of it (a
//! type's cache dropped).
//!
//! kcache allocates through the C library's `malloc`. glibc keeps what was freed in its arenas
//! for reuse and returns pages to the system only from the top of each heap: after a cache of
//! tens of thousands of small objects is freed, the pages between live allocations stay
//! resident, and the process's memory does not go down. `malloc_trim(0)` walks every arena and
//! hands the free pages back (`madvise`). It locks each arena while it walks it, so it is
//! called rarely, after a large free, and off the request path.
//!
//! This is the only `unsafe` in kcache, kept in a crate of its own so that the others can
//! forbid it.
#![deny(unsafe_code)]
#![deny(rustdoc::broken_intra_doc_links)]

/// Ask the allocator to give its free pages back to the system; whether it gave any. Takes
/// milliseconds on a small heap and up to a few hundred on a large, fragmented one (a
/// `madvise` per free block of a page or more): call it from a blocking thread.
///
/// On anything but Linux with glibc it does nothing and returns false: musl and the other
/// systems' allocators have no such call.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn release_free_memory() -> bool {
    // SAFETY: `malloc_trim` takes no pointer and touches only the allocator's own state,
    // which glibc locks against every other allocator call.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// See the glibc version above: nothing to do here.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_memory() -> bool {
    false
}

#[cfg(test)]
mod tests {
    #[test]
    fn freed_memory_can_be_given_back() {
        // Many small allocations, freed: what a dropped cache leaves behind.
        let blocks: Vec<Vec<u8>> = (0..20_000).map(|i| vec![i as u8; 512]).collect();
        drop(blocks);
        // Whether pages came back depends on the heap's layout; the call must simply be safe
        // to make at any time, twice included.
        let _ = super::release_free_memory();
        let _ = super::release_free_memory();
    }
}
