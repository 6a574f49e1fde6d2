//! The life lock: a file on this host, locked (`flock`) for as long as a life of the node runs
//! and naming that life (member id and lease). When a node starts again on the same host and
//! finds the lock free while the life it names is still registered, that life's process is dead
//! (the operating system releases the lock with the process; a paused process still holds it),
//! so its lease can be revoked at once instead of waited out: a restart after kill -9 is ready in
//! milliseconds, not a lease TTL. Anything else (no file, another process holding it, a
//! different life named, an I/O error) leaves the normal wait in place.
//!
//! The file is `{temp}/mink-life-{node_id}-{store}.lock`, `store` a hash of the metadata store's
//! endpoints and prefix, so nodes of different clusters on one host never share one. It must be
//! on a local file system (locks over NFS are not to be trusted).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

use mink_metadata::LeaseId;

use crate::settings::Settings;

/// A held life lock.
#[derive(Debug)]
pub(crate) struct LifeLock {
    file: File,
    path: PathBuf,
    previous: Option<(String, LeaseId)>,
}

/// The lock file of `settings`' node on this host.
fn path(settings: &Settings) -> PathBuf {
    let store = settings.metadata.etcd_endpoints.join(",") + "|" + &settings.metadata.etcd_prefix;
    // FNV-1a: the same name on every run and build.
    let hash = store.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    std::env::temp_dir().join(format!("mink-life-{}-{hash:016x}.lock", settings.node_id))
}

impl LifeLock {
    /// Takes the lock, reading which life held it last; `None` when another process holds it or
    /// the file cannot be used.
    pub(crate) fn acquire(settings: &Settings) -> Option<LifeLock> {
        let path = path(settings);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .ok()?;
        file.try_lock().ok()?;
        let mut text = String::new();
        file.read_to_string(&mut text).ok()?;
        let previous = text.split_once(' ').and_then(|(member, lease)| {
            Some((member.to_owned(), lease.trim().parse::<LeaseId>().ok()?))
        });
        Some(LifeLock {
            file,
            path,
            previous,
        })
    }

    /// The life that held the lock last, if it said.
    pub(crate) fn previous(&self) -> Option<&(String, LeaseId)> {
        self.previous.as_ref()
    }

    /// Names this life in the lock.
    pub(crate) fn record(&mut self, member: &str, lease: LeaseId) {
        let written = self
            .file
            .set_len(0)
            .and_then(|()| self.file.seek(SeekFrom::Start(0)))
            .and_then(|_| writeln!(self.file, "{member} {lease}"))
            .and_then(|()| self.file.sync_all());
        if let Err(e) = written {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot write the life lock; a restart after a crash waits out the lease");
        }
    }
}
