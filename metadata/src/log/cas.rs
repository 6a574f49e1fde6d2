//! Writing records, shared by every key family: creating a record that must be new, and the
//! compare-and-swap retry loop that read-modify-write operations (stream updates, schema
//! additions, commits) run in.

use std::future::Future;

use super::Metadata;
use super::read::get_record;
use crate::error::{MetaError, Result};
use crate::kv::{CasOutcome, MetaKvExt};
use crate::value::{MetaRecord, encode};

impl Metadata {
    /// Runs `attempt` (given its number, from 0) until it returns `Some`: `None` means it lost a
    /// race to a concurrent writer and should re-read. After
    /// [`max_attempts`](super::MetadataOptions::max_attempts) lost races, fails with
    /// [`MetaError::Contended`] naming `operation` and `key`.
    pub(super) async fn retry<T, Fut>(
        &self,
        operation: &'static str,
        key: &str,
        mut attempt: impl FnMut(u32) -> Fut,
    ) -> Result<T>
    where
        Fut: Future<Output = Result<Option<T>>>,
    {
        for n in 0..self.options.max_attempts {
            if let Some(done) = attempt(n).await? {
                return Ok(done);
            }
        }
        Err(MetaError::Contended {
            operation,
            key: key.to_owned(),
            attempts: self.options.max_attempts,
        })
    }

    /// Writes `record` at `key` if nothing is there; fails with [`MetaError::AlreadyExists`]
    /// (`what`, `id`) otherwise.
    pub(super) async fn create_record<R: MetaRecord>(
        &self,
        key: &str,
        record: &R,
        what: &'static str,
        id: String,
    ) -> Result<()> {
        match self
            .kv
            .compare_and_swap(key, 0, Some(encode(record)))
            .await?
        {
            CasOutcome::Swapped { .. } => Ok(()),
            CasOutcome::Conflict { .. } => Err(MetaError::AlreadyExists { what, id }),
        }
    }

    /// Reads the record at `key`, lets `change` edit it and writes it back if nobody wrote it in
    /// between, re-reading after each lost race ([`Metadata::retry`]). A record `change` leaves as
    /// it was is returned without a write; a missing one fails with [`MetaError::NotFound`]
    /// (`what`, `id`); an error from `change` is returned as it is, with nothing written.
    pub(super) async fn update_record<R: MetaRecord + Clone + PartialEq>(
        &self,
        key: &str,
        operation: &'static str,
        (what, id): (&'static str, &str),
        change: impl Fn(&mut R) -> Result<()>,
    ) -> Result<R> {
        let change = &change;
        self.retry(operation, key, |_| async move {
            let Some((mut record, version)) = get_record::<R>(&self.kv.get(key).await?)? else {
                return Err(MetaError::NotFound {
                    what,
                    id: id.to_owned(),
                });
            };
            let before = record.clone();
            change(&mut record)?;
            if record == before {
                return Ok(Some(record));
            }
            match self
                .kv
                .compare_and_swap(key, version, Some(encode(&record)))
                .await?
            {
                CasOutcome::Swapped { .. } => Ok(Some(record)),
                CasOutcome::Conflict { .. } => Ok(None),
            }
        })
        .await
    }
}
