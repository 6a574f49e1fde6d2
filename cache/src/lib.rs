//! Mink's read caches: the tail cache (moka) filled by the write path, and the block cache (foyer) of
//! fixed-size pages of committed objects, with single-flight loads and growing readahead.
//!
//! The crate is filled in by the cache issue; until then it holds nothing.
