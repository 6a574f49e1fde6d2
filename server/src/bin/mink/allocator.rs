//! The process's allocator: mimalloc, with freed memory kept for ten seconds before it goes
//! back to the OS, and without transparent huge pages.
//!
//! mimalloc rather than the system allocator: a node holds and frees many page-sized buffers
//! (block cache pages, WAL groups, request bodies, batches in flight), which the system
//! allocator maps and unmaps afresh each time, paying a page fault per 4 KiB touched.
//!
//! mimalloc by default purges freed memory (hands it back to the OS) a second after it was
//! freed, and a buffer allocated again after that faults its pages in again, each zeroed by the
//! kernel: in a catch-up replay that cycles the block cache, a quarter of the node's CPU went to
//! zeroing pages (docs/performance-notes.md). With ten seconds the replay's page faults fell
//! from about 9,000 to about 500, and a burst's memory still goes back to the OS soon after it
//! ends.
//!
//! mimalloc also asks the kernel for transparent huge pages on its arenas (`madvise`), and where
//! the kernel grants them on request (the common `madvise` setting), its `khugepaged` fills
//! sparse arenas into whole 2 MiB pages: a node with 1,000 open tablets and nothing to do grew
//! from 50 to 160 MiB of RSS in two minutes, the pages of that growth mostly empty. The node
//! turns them off for itself at start (`PR_SET_THP_DISABLE`); group commit also went 17-28%
//! faster at 15-25% less CPU per GB without them (docs/performance-notes.md).

/// The allocator of every `mink` process.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (the same value in its v2 and v3 `mimalloc.h`; the sys
/// crate does not name it).
const PURGE_DELAY_OPTION: libmimalloc_sys::mi_option_t = 15;

/// How long freed memory stays with the process before it is purged, in milliseconds.
const PURGE_DELAY_MS: std::ffi::c_long = 10_000;

/// Sets the purge delay, unless `MIMALLOC_PURGE_DELAY` is set in the environment (mimalloc reads
/// it itself, so an operator can still choose).
pub(crate) fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    #[expect(
        unsafe_code,
        reason = "mimalloc's option setter is a C function; it takes plain integers and is safe \
                  to call at any time"
    )]
    // SAFETY: `mi_option_set` only stores the value in mimalloc's option table; the option id
    // is a valid `mi_option_t` of the mimalloc this crate links.
    unsafe {
        libmimalloc_sys::mi_option_set(PURGE_DELAY_OPTION, PURGE_DELAY_MS);
    }
}

/// Turns transparent huge pages off for the process, unless `MIMALLOC_ALLOW_THP` is set in the
/// environment (mimalloc reads it itself, so an operator can still choose). Called first thing
/// in `main`: pages the process already has keep their size.
pub(crate) fn no_transparent_huge_pages() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return;
    }
    if let Err(e) = rustix::thread::disable_transparent_huge_pages(true) {
        // An old or restricted kernel: the process runs as before, with more memory.
        eprintln!("mink: could not turn transparent huge pages off ({e}); continuing with them");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transparent_huge_pages_are_off_unless_the_environment_chose() {
        let chose = std::env::var_os("MIMALLOC_ALLOW_THP").is_some();
        no_transparent_huge_pages();
        let off = rustix::thread::transparent_huge_pages_are_disabled().expect("prctl");
        assert!(off || chose, "the process still has transparent huge pages");
    }

    #[test]
    fn the_purge_delay_is_set_unless_the_environment_chose() {
        let get = || {
            #[expect(unsafe_code, reason = "reading mimalloc's option back")]
            // SAFETY: `mi_option_get` reads mimalloc's option table.
            unsafe {
                libmimalloc_sys::mi_option_get(PURGE_DELAY_OPTION)
            }
        };
        let chosen: Option<std::ffi::c_long> = std::env::var("MIMALLOC_PURGE_DELAY")
            .ok()
            .and_then(|v| v.parse().ok());
        // Before: the purge delay's default in the mimalloc linked (1000 ms, its `options.c`), or
        // the environment's value; either way the option id is the purge delay's.
        assert_eq!(
            get(),
            chosen.unwrap_or(1000),
            "option {PURGE_DELAY_OPTION} is not the purge delay"
        );
        keep_freed_memory();
        assert_eq!(get(), chosen.unwrap_or(PURGE_DELAY_MS));
    }
}
