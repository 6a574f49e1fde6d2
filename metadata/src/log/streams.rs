//! Streams: their lifecycle (create, open with a new epoch, close, delete) and trims.
//!
//! | Key | Value |
//! |---|---|
//! | `mink/streams/{id:020}` | [`StreamRecord`]: epoch, owner, start and committed end offsets, state |
//!
//! Opening a stream bumps its epoch; every later change by an older owner fails with
//! [`MetaError::Fenced`] ([`check_owner`]). Commits advance the end offset (`commit.rs`).

use super::Metadata;
use super::read::{SCAN_PAGE, decode_all, get_record};
use crate::error::{InvalidRequest, MetaError, Result};
use crate::keys;
use crate::kv::{Compare, MetaKvExt, Op, Txn};
use crate::records::{StreamRecord, StreamState};
use crate::value::encode;

impl Metadata {
    /// Creates a new, closed stream at epoch 0 with offsets 0..0.
    pub async fn create_stream(&self) -> Result<StreamRecord> {
        let id = self.stream_ids.next().await?;
        let record = StreamRecord::new(id);
        self.create_record(&keys::stream(id), &record, "stream", id.to_string())
            .await?;
        Ok(record)
    }

    /// Creates a new stream already open for `node` at epoch 1, in one metadata transaction
    /// with the caller's own compares and writes (`with`, given the new stream's id: a registry
    /// entry naming the stream, say): the record [`Metadata::create_stream`] and then
    /// [`Metadata::open_stream`] leave, in one commit instead of two (and with the caller's
    /// writes in it rather than in a third). A new stream is held by
    /// nobody else, so this fences nothing and suits [`Metadata::open_stream_exclusive`]'s
    /// callers as well. Returns `None`, having written nothing, when one of `with`'s compares
    /// does not hold; the id it was given is not handed out again. `with` must not write the
    /// stream's own key (the backend refuses a key written twice).
    pub async fn create_open_stream(
        &self,
        node: &str,
        with: impl FnOnce(u64) -> Txn,
    ) -> Result<Option<StreamRecord>> {
        let id = self.stream_ids.next().await?;
        let key = keys::stream(id);
        let record = StreamRecord {
            epoch: 1,
            owner: Some(node.to_owned()),
            state: StreamState::Open,
            ..StreamRecord::new(id)
        };
        let Txn {
            mut compares,
            mut on_success,
        } = with(id);
        compares.push(Compare::absent(&key));
        on_success.push(Op::put(&key, encode(&record)));
        let outcome = self
            .kv
            .txn(Txn {
                compares,
                on_success,
            })
            .await?;
        Ok(outcome.succeeded.then_some(record))
    }

    /// Reads a stream record.
    pub async fn get_stream(&self, id: u64) -> Result<Option<StreamRecord>> {
        Ok(get_record::<StreamRecord>(&self.kv.get(&keys::stream(id)).await?)?.map(|(r, _)| r))
    }

    /// Every stream record, in id order.
    pub async fn list_streams(&self) -> Result<Vec<StreamRecord>> {
        decode_all(&self.kv.scan_all(keys::STREAMS, SCAN_PAGE).await?)
    }

    /// Opens stream `id` for `node`: bumps the epoch (fencing every older epoch), sets the owner
    /// and state Open. Returns the new record, whose epoch the owner presents from now on.
    pub async fn open_stream(&self, id: u64, node: &str) -> Result<StreamRecord> {
        self.update_stream(id, |s| {
            if s.state == StreamState::Deleted {
                return Err(MetaError::StreamNotOpen {
                    stream_id: id,
                    state: s.state.to_string(),
                });
            }
            s.epoch += 1;
            s.owner = Some(node.to_owned());
            s.state = StreamState::Open;
            Ok(())
        })
        .await
    }

    /// Opens stream `id` for member `node` of node `node_id` as [`Metadata::open_stream`] does,
    /// unless another node's member holds it open: then it fails with
    /// [`MetaError::StreamHeld`] and changes nothing (docs/cluster.md, "taking a stream"). A
    /// stream held by an earlier life of `node_id` is taken: that life's WAL was recovered
    /// before this one opened anything; so is one held by a member whose recovery is done.
    pub async fn open_stream_exclusive(
        &self,
        id: u64,
        node: &str,
        node_id: &str,
    ) -> Result<StreamRecord> {
        match self.open_stream_unless_held(id, node, node_id, None).await {
            // A dead member whose recovery is done holds nothing any more.
            Err(MetaError::StreamHeld { owner, .. }) if self.recovered(&owner).await? => {
                self.open_stream_unless_held(id, node, node_id, Some(&owner))
                    .await
            }
            other => other,
        }
    }

    async fn open_stream_unless_held(
        &self,
        id: u64,
        node: &str,
        node_id: &str,
        recovered: Option<&str>,
    ) -> Result<StreamRecord> {
        self.update_stream(id, |s| {
            if s.state == StreamState::Deleted {
                return Err(MetaError::StreamNotOpen {
                    stream_id: id,
                    state: s.state.to_string(),
                });
            }
            if s.state == StreamState::Open
                && let Some(owner) = &s.owner
                && owner != node
                && !crate::records::is_life_of(owner, node_id)
                && Some(owner.as_str()) != recovered
            {
                return Err(MetaError::StreamHeld {
                    stream_id: id,
                    owner: owner.clone(),
                });
            }
            s.epoch += 1;
            s.owner = Some(node.to_owned());
            s.state = StreamState::Open;
            Ok(())
        })
        .await
    }

    /// Closes stream `id` held at `epoch`, so another node may open it.
    pub async fn close_stream(&self, id: u64, epoch: u64) -> Result<StreamRecord> {
        self.update_stream(id, |s| {
            check_owner(s, epoch)?;
            s.state = StreamState::Closed;
            Ok(())
        })
        .await
    }

    /// Marks stream `id` held at `epoch` deleted; it can never be opened again.
    pub async fn delete_stream(&self, id: u64, epoch: u64) -> Result<StreamRecord> {
        self.update_stream(id, |s| {
            check_owner(s, epoch)?;
            s.state = StreamState::Deleted;
            Ok(())
        })
        .await
    }

    /// Moves the start offset of stream `id` (held at `epoch`) forward to `offset`. A trim below
    /// the current start changes nothing; past the committed end is invalid.
    pub async fn trim_stream(&self, id: u64, epoch: u64, offset: u64) -> Result<StreamRecord> {
        self.update_stream(id, |s| {
            check_owner(s, epoch)?;
            if offset > s.end_offset {
                return Err(MetaError::Invalid(InvalidRequest::TrimPastEnd {
                    stream_id: id,
                    offset,
                    end_offset: s.end_offset,
                }));
            }
            s.start_offset = s.start_offset.max(offset);
            Ok(())
        })
        .await
    }

    /// Applies `change` to stream `id`'s record with a compare-and-swap, retrying lost races.
    async fn update_stream(
        &self,
        id: u64,
        change: impl Fn(&mut StreamRecord) -> Result<()>,
    ) -> Result<StreamRecord> {
        let key = keys::stream(id);
        self.update_record(&key, "update stream", ("stream", &id.to_string()), change)
            .await
    }
}

/// Checks that the caller holds `stream` at `epoch` and that it is open.
pub(super) fn check_owner(stream: &StreamRecord, epoch: u64) -> Result<()> {
    if stream.epoch != epoch {
        return Err(MetaError::Fenced {
            stream_id: stream.id,
            epoch,
            current_epoch: stream.epoch,
        });
    }
    if stream.state != StreamState::Open {
        return Err(MetaError::StreamNotOpen {
            stream_id: stream.id,
            state: stream.state.to_string(),
        });
    }
    Ok(())
}
