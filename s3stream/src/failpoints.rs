//! Named failpoints at every durability step, armed per engine instance (never global), so a
//! test can stop the engine exactly there and check what a crash at that moment leaves behind.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// After a WAL object's PUT succeeded, before its appends are acknowledged.
pub const WAL_AFTER_PUT: &str = "wal.after_put";
/// After the compactor uploaded its objects, before the metadata commit.
pub const COMPACT_BEFORE_COMMIT: &str = "compact.before_commit";
/// After the metadata commit, before the compacted WAL objects are deleted.
pub const COMPACT_BEFORE_WAL_DELETE: &str = "compact.before_wal_delete";

/// Every failpoint name.
pub const ALL: [&str; 3] = [
    WAL_AFTER_PUT,
    COMPACT_BEFORE_COMMIT,
    COMPACT_BEFORE_WAL_DELETE,
];

/// The failpoints of one engine. Armed points fire every time they are reached until disarmed.
#[derive(Debug, Default)]
pub struct Failpoints {
    armed: Mutex<HashSet<&'static str>>,
    fired: AtomicU64,
}

impl Failpoints {
    /// No point armed.
    pub fn new() -> Self {
        Self::default()
    }

    /// Arms `name` (one of [`ALL`]).
    pub fn arm(&self, name: &'static str) {
        self.lock().insert(name);
    }

    /// Disarms `name`.
    pub fn disarm(&self, name: &'static str) {
        self.lock().remove(name);
    }

    /// How many times an armed point fired.
    pub fn fired(&self) -> u64 {
        self.fired.load(Ordering::Relaxed)
    }

    /// `Err(name)` if `name` is armed.
    pub(crate) fn check(&self, name: &'static str) -> Result<(), &'static str> {
        if self.lock().contains(name) {
            self.fired.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(failpoint = name, "failpoint fired");
            return Err(name);
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<&'static str>> {
        self.armed.lock().unwrap_or_else(|p| p.into_inner())
    }
}
