//! Objects and the commit: the one atomic step that adds objects, removes compacted ones, advances
//! stream end offsets and retires compacted WAL ids, fenced by the epoch of every stream it names.
//!
//! | Key | Value |
//! |---|---|
//! | `mink/objects/{id:020}` | [`ObjectRecord`]: kind, object key, size, the stream ranges it holds |
//!
//! A commit also compares and writes `mink/streams/{id:020}` (`streams.rs`) and
//! `mink/wal/{node}/{first_id:020}` (`wal_registry.rs`) in the same transaction.

use std::collections::{HashMap, HashSet};

use super::Metadata;
use super::read::{SCAN_PAGE, decode_all, get_record};
use super::streams::check_owner;
use super::wal_registry::{WalCompacted, retire_wal};
use crate::error::{InvalidRequest, MetaError, Result};
use crate::keys;
use crate::kv::{Compare, KeyValue, MetaKvExt, Op, Txn};
use crate::records::{ObjectRecord, StreamRecord};
use crate::value::encode;

/// One atomic change of the metadata log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitRequest {
    /// Every stream the commit touches, with the epoch the caller holds. All are fenced.
    pub stream_epochs: Vec<(u64, u64)>,
    /// Objects to add (their ids must be new).
    pub add_objects: Vec<ObjectRecord>,
    /// Object ids to remove (they must exist).
    pub remove_objects: Vec<u64>,
    /// New committed end offsets `(stream, end)`; each stream must be in `stream_epochs` and an end
    /// may not move backwards.
    pub advance: Vec<(u64, u64)>,
    /// WAL ids retired by this commit.
    pub remove_wal: Vec<WalCompacted>,
}

/// What a successful commit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOutcome {
    /// The KV revision of the commit.
    pub revision: u64,
    /// The records of the streams in `stream_epochs` after the commit.
    pub streams: Vec<StreamRecord>,
}

impl Metadata {
    /// Applies `request` atomically: either every object is added, every removal, advance and WAL
    /// retirement happens, or nothing does. Fails with [`MetaError::Fenced`] if any stream moved to
    /// another epoch, [`MetaError::StreamNotOpen`] if one is not open, [`MetaError::NotFound`] for a
    /// missing stream or removed object, [`MetaError::AlreadyExists`] for a reused object id, and
    /// [`MetaError::Invalid`] for an end offset moving backwards.
    pub async fn commit(&self, request: CommitRequest) -> Result<CommitOutcome> {
        validate_request(&request)?;
        let request = &request;
        self.retry("commit", keys::STREAMS, |attempt| {
            self.commit_attempt(request, attempt)
        })
        .await
    }

    /// One try of [`Metadata::commit`]: reads what the request names, builds the transaction and
    /// runs it. `None`: something changed under us; re-read (a new epoch surfaces as Fenced).
    async fn commit_attempt(
        &self,
        request: &CommitRequest,
        attempt: u32,
    ) -> Result<Option<CommitOutcome>> {
        let stream_keys: Vec<String> = request
            .stream_epochs
            .iter()
            .map(|(id, _)| keys::stream(*id))
            .collect();
        let removed_keys: Vec<String> = request
            .remove_objects
            .iter()
            .map(|id| keys::object(*id))
            .collect();
        let streams = self.kv.get_many(&stream_keys);
        let removed = self.kv.get_many(&removed_keys);
        let wal = self.read_wal_registrations(&request.remove_wal);
        let (streams, removed, wal) = futures::try_join!(streams, removed, wal)?;

        let mut compares = Vec::new();
        let mut ops = Vec::new();
        let after = fence_and_advance(request, &streams, &mut compares, &mut ops)?;
        for (id, kv) in request.remove_objects.iter().zip(&removed) {
            let Some(kv) = kv else {
                return Err(MetaError::NotFound {
                    what: "object",
                    id: id.to_string(),
                });
            };
            compares.push(Compare::version(kv.key.clone(), kv.version));
            ops.push(Op::delete(kv.key.clone()));
        }
        for object in &request.add_objects {
            let key = keys::object(object.id);
            if attempt > 0 && self.kv.get(&key).await?.is_some() {
                return Err(MetaError::AlreadyExists {
                    what: "object",
                    id: object.id.to_string(),
                });
            }
            compares.push(Compare::absent(key.clone()));
            ops.push(Op::put(key, encode(object)));
        }
        for (retire, reservations) in request.remove_wal.iter().zip(&wal) {
            retire_wal(retire, reservations, &mut compares, &mut ops)?;
        }
        let outcome = self
            .kv
            .txn(Txn {
                compares,
                on_success: ops,
            })
            .await?;
        if !outcome.succeeded {
            return Ok(None);
        }
        self.index
            .apply(&request.add_objects, &request.remove_objects);
        Ok(Some(CommitOutcome {
            revision: outcome.revision,
            streams: after,
        }))
    }

    /// Reads an object record.
    pub async fn get_object(&self, id: u64) -> Result<Option<ObjectRecord>> {
        Ok(get_record::<ObjectRecord>(&self.kv.get(&keys::object(id)).await?)?.map(|(r, _)| r))
    }

    /// Every object record, in id order.
    pub async fn list_objects(&self) -> Result<Vec<ObjectRecord>> {
        decode_all(&self.kv.scan_all(keys::OBJECTS, SCAN_PAGE).await?)
    }
}

/// Adds a compare on each fenced stream's record (`streams`, as read, in `stream_epochs` order)
/// and a write of each advanced end. Returns the records as the commit leaves them.
fn fence_and_advance(
    request: &CommitRequest,
    streams: &[Option<KeyValue>],
    compares: &mut Vec<Compare>,
    ops: &mut Vec<Op>,
) -> Result<Vec<StreamRecord>> {
    let advance: HashMap<u64, u64> = request.advance.iter().copied().collect();
    let mut after = Vec::with_capacity(streams.len());
    for ((id, epoch), kv) in request.stream_epochs.iter().zip(streams) {
        let Some((mut record, version)) = get_record::<StreamRecord>(kv)? else {
            return Err(MetaError::NotFound {
                what: "stream",
                id: id.to_string(),
            });
        };
        check_owner(&record, *epoch)?;
        compares.push(Compare::version(keys::stream(*id), version));
        if let Some(end) = advance.get(id) {
            if *end < record.end_offset {
                return Err(MetaError::Invalid(InvalidRequest::EndMovesBack {
                    stream_id: *id,
                    end_offset: record.end_offset,
                    requested: *end,
                }));
            }
            if *end != record.end_offset {
                record.end_offset = *end;
                ops.push(Op::put(keys::stream(*id), encode(&record)));
            }
        }
        after.push(record);
    }
    Ok(after)
}

/// Checks a request before any read: each stream fenced once, advanced only if fenced and at most
/// once, objects valid and each added or removed once, node names usable as key segments.
fn validate_request(request: &CommitRequest) -> Result<()> {
    let mut fenced = HashSet::new();
    for (id, _) in &request.stream_epochs {
        if !fenced.insert(*id) {
            return Err(MetaError::Invalid(InvalidRequest::StreamFencedTwice {
                stream_id: *id,
            }));
        }
    }
    let mut advanced = HashSet::new();
    for (id, _) in &request.advance {
        if !fenced.contains(id) {
            return Err(MetaError::Invalid(InvalidRequest::AdvanceWithoutEpoch {
                stream_id: *id,
            }));
        }
        if !advanced.insert(*id) {
            return Err(MetaError::Invalid(InvalidRequest::AdvancedTwice {
                stream_id: *id,
            }));
        }
    }
    let mut ids = HashSet::new();
    for object in &request.add_objects {
        object.validate()?;
        if !ids.insert(object.id) {
            return Err(MetaError::Invalid(InvalidRequest::ObjectAddedTwice {
                object_id: object.id,
            }));
        }
    }
    for id in &request.remove_objects {
        if !ids.insert(*id) {
            return Err(MetaError::Invalid(InvalidRequest::ObjectRemovedTwice {
                object_id: *id,
            }));
        }
    }
    for w in &request.remove_wal {
        keys::check_segment("node", &w.node)?;
    }
    Ok(())
}
