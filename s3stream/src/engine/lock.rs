//! Locking the engine's std mutexes: a holder that panicked leaves the guarded state as it was
//! between two steps, so the next holder takes the lock over instead of failing too.

use std::sync::{Mutex, MutexGuard};

/// The guard of `mutex`, poisoned or not.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
