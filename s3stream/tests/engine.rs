//! The stream engine end to end on in-memory storage and metadata: appends, reads from the log
//! cache and from committed objects, compaction, recovery after a crash at every failpoint,
//! fencing, back-pressure, trim, close and destroy.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use mink_metadata::{MemoryKv, MetaKv, Metadata, MetadataOptions};
use mink_s3stream::failpoints;
use mink_s3stream::storage::{
    CountingStorage, FaultyStorage, LatencyDistribution, LatencyProfile, LatencyStorage,
    ObjectStoreBackend,
};
use mink_s3stream::{
    Build, CompactionSettings, Engine, EngineSettings, Failpoints, ObjectStorage, ReadBound,
    Stream, StreamError,
};

mod common;

use common::{WAIT, append_n, expected, manual, payload, read_all};

/// Storage and metadata that outlive engines, as a bucket and an etcd outlive a process.
struct World {
    kv: Arc<dyn MetaKv>,
    storage: Arc<CountingStorage>,
}

impl World {
    fn new() -> Self {
        let memory: Arc<dyn ObjectStorage> = Arc::new(ObjectStoreBackend::memory());
        World {
            kv: Arc::new(MemoryKv::new()),
            storage: Arc::new(CountingStorage::new(memory)),
        }
    }

    async fn metadata(&self) -> Arc<Metadata> {
        Arc::new(
            Metadata::open(self.kv.clone(), MetadataOptions::default())
                .await
                .unwrap(),
        )
    }

    async fn engine(&self, node: &str, settings: EngineSettings) -> Engine {
        self.engine_with(
            node,
            settings,
            self.storage.clone(),
            Arc::new(Failpoints::new()),
        )
        .await
        .unwrap()
    }

    async fn engine_with(
        &self,
        node: &str,
        settings: EngineSettings,
        storage: Arc<dyn ObjectStorage>,
        failpoints: Arc<Failpoints>,
    ) -> Result<Engine, StreamError> {
        Engine::builder()
            .node(node)
            .wal_storage(storage)
            .metadata(self.metadata().await)
            .settings(settings)
            .failpoints(failpoints)
            .open()
            .await
    }
}

/// `settings` committing every WAL object as it is (when the WAL and data stores are one).
fn adopting(mut settings: EngineSettings) -> EngineSettings {
    settings.compaction.adopt_wal_object_bytes = 0;
    settings
}

/// [`manual`] without a tail cache, so reads of compacted data go to committed objects.
fn no_tail_cache() -> EngineSettings {
    let mut settings = manual();
    settings.cache.tail.capacity_bytes = 0;
    settings
}

/// Appends `payload` as one batch of one offset with the CRC the appender claims for it, and
/// waits until it is durable.
async fn append_with_crc(stream: &Stream, payload: Bytes, crc: Option<u32>) {
    let mut permit = Some(stream.reserve(payload.len()).await.unwrap());
    let mut payload = Some(payload);
    let pending = stream
        .submit_with(&mut permit, &mut |_| match payload.take() {
            Some(payload) => Build::Append {
                count: 1,
                payload,
                crc,
            },
            None => Build::Nothing,
        })
        .unwrap()
        .expect("the builder appends");
    tokio::time::timeout(WAIT, pending.durable())
        .await
        .unwrap()
        .unwrap();
}

/// A compaction round covers a large payload with the CRC its appender gave (the one the WAL
/// used), not by reading the payload again: the right CRC reads back from the committed object,
/// and a wrong one fails that object's block check, which it could not if the compactor had
/// computed the CRC afresh.
#[tokio::test]
async fn a_compaction_round_covers_payloads_with_the_crc_their_appender_gave() {
    let world = World::new();
    let mut settings = no_tail_cache();
    // Rewrite every WAL object from the log cache rather than commit it as it is.
    settings.compaction.adopt_wal_object_bytes = u64::MAX;
    let engine = world.engine("n1", settings).await;
    let right = engine
        .open_stream(engine.create_stream().await.unwrap().id)
        .await
        .unwrap();
    let wrong = engine
        .open_stream(engine.create_stream().await.unwrap().id)
        .await
        .unwrap();
    let body = Bytes::from(
        (0..64u32 << 10)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>(),
    );
    let crc = crc32c::crc32c(&body);
    append_with_crc(&right, body.clone(), Some(crc)).await;
    append_with_crc(&wrong, body.clone(), Some(crc ^ 1)).await;
    // Before compaction both are served from the log cache, whatever the CRC.
    assert_eq!(read_all(&wrong, 0).await, vec![(0, body.clone())]);

    engine.compact_now().await.unwrap();
    assert_eq!(engine.uncompacted_bytes(), 0);
    assert_eq!(read_all(&right, 0).await, vec![(0, body)]);
    let read = wrong.fetch(0, 1, 1 << 20, ReadBound::Confirmed).await;
    assert!(
        matches!(read, Err(StreamError::CorruptObject { .. })),
        "a block covered with a wrong CRC fails its check: {read:?}"
    );
}

#[tokio::test]
async fn appends_are_readable_at_the_confirm_offset_and_after_compaction() {
    let world = World::new();
    let engine = world.engine("n1", no_tail_cache()).await;
    let id = engine.create_stream().await.unwrap().id;
    let stream = engine.open_stream(id).await.unwrap();
    append_n(&stream, 20).await;
    let offsets = stream.offsets();
    assert_eq!((offsets.start, offsets.confirm, offsets.next), (0, 40, 40));
    assert_eq!(read_all(&stream, 0).await, expected(0, 40));
    // A read from inside a batch starts at the batch holding the offset.
    let got = stream
        .fetch(5, 6, 1 << 20, ReadBound::Confirmed)
        .await
        .unwrap();
    assert_eq!(got[0].base_offset, 4);

    let gets_before = engine
        .metrics()
        .object_gets
        .load(std::sync::atomic::Ordering::Relaxed);
    engine.compact_now().await.unwrap();
    assert_eq!(engine.uncompacted_bytes(), 0);
    assert!(
        world.storage.list("wal/").await.unwrap().is_empty(),
        "compacted WAL objects are deleted"
    );
    assert_eq!(read_all(&stream, 0).await, expected(0, 40));
    let gets_after = engine
        .metrics()
        .object_gets
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        gets_after > gets_before,
        "reads now come from committed objects"
    );
    append_n(&stream, 5).await;
    assert_eq!(read_all(&stream, 0).await, expected(0, 50));
}

/// A stream created and opened in one metadata transaction with the caller's writes: it takes
/// appends at once, survives a crash like any other, gets its manifest; when the caller's
/// compare fails nothing is written and nothing is opened.
#[tokio::test]
async fn a_stream_created_open_with_the_callers_writes_or_not_at_all() {
    use mink_metadata::{Compare, Op, Txn};
    let world = World::new();
    let engine = world.engine("n1", manual()).await;
    let entry = |id: u64| Txn {
        compares: vec![Compare::absent("mink/test/entry")],
        on_success: vec![Op::put("mink/test/entry", Bytes::from(id.to_string()))],
    };
    let (stream, manifest) = engine
        .create_open_stream(Bytes::from_static(b"bucket a"), entry)
        .await
        .unwrap()
        .expect("the entry is absent");
    manifest.await;
    let id = stream.id();
    let metadata = world.metadata().await;
    let record = metadata.get_stream(id).await.unwrap().unwrap();
    assert_eq!((record.epoch, record.owner.as_deref()), (1, Some("n1")));
    let entry_value = world.kv.get("mink/test/entry").await.unwrap().unwrap();
    assert_eq!(entry_value.value, Bytes::from(id.to_string()));
    assert_eq!(
        world
            .storage
            .list(&format!("manifests/streams/{id:016x}"))
            .await
            .unwrap()
            .len(),
        1,
        "the manifest is written"
    );
    assert!(matches!(
        engine.open_stream(id).await,
        Err(StreamError::AlreadyOpen { .. })
    ));
    append_n(&stream, 3).await;

    // Lost: no stream record, no manifest, nothing open.
    let streams = metadata.list_streams().await.unwrap();
    let manifests = world.storage.list("manifests/").await.unwrap();
    assert!(
        engine
            .create_open_stream(Bytes::from_static(b"bucket b"), entry)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(metadata.list_streams().await.unwrap(), streams);
    assert_eq!(world.storage.list("manifests/").await.unwrap(), manifests);

    // After a crash the stream is recovered like one created and opened apart.
    engine.abort();
    drop(stream);
    let engine = world.engine("n1", manual()).await;
    let stream = engine.open_stream(id).await.unwrap();
    assert_eq!(stream.epoch(), 2);
    assert_eq!(read_all(&stream, 0).await, expected(0, 6));
}

#[tokio::test]
async fn an_idle_append_costs_one_put() {
    let world = World::new();
    let engine = world.engine("n1", manual()).await;
    let id = engine.create_stream().await.unwrap().id;
    let stream = engine.open_stream(id).await.unwrap();
    for i in 1..=5 {
        let before = world.storage.counts().puts;
        append_n(&stream, 1).await;
        assert_eq!(world.storage.counts().puts - before, 1, "append {i}");
    }
}

#[tokio::test]
async fn reads_outside_the_bounds_are_refused() {
    let world = World::new();
    let engine = world.engine("n1", manual()).await;
    let id = engine.create_stream().await.unwrap().id;
    let stream = engine.open_stream(id).await.unwrap();
    append_n(&stream, 5).await;
    assert!(matches!(
        stream.fetch(11, 20, 100, ReadBound::Confirmed).await,
        Err(StreamError::BeyondBound { bound: 10, .. })
    ));
    assert!(
        stream
            .fetch(10, 20, 100, ReadBound::Confirmed)
            .await
            .unwrap()
            .is_empty()
    );
    stream.trim(4).await.unwrap();
    assert_eq!(stream.offsets().start, 4);
    assert!(matches!(
        stream.fetch(2, 20, 100, ReadBound::Confirmed).await,
        Err(StreamError::BelowStart { start: 4, .. })
    ));
    assert_eq!(read_all(&stream, 4).await, expected(4, 10));
    assert!(matches!(
        stream.trim(11).await,
        Err(StreamError::TrimBeyondConfirm { .. })
    ));
    assert!(matches!(
        stream.append_at(3, 1, payload(3)).await,
        Err(StreamError::OffsetMismatch { next: 10, .. })
    ));
    assert!(matches!(
        stream.append(0, payload(3)).await,
        Err(StreamError::EmptyBatch { .. })
    ));
    assert_eq!(stream.offsets().next, 10, "refused appends change nothing");
}

#[tokio::test]
async fn log_end_reads_see_appends_before_they_are_durable() {
    let world = World::new();
    let faulty = Arc::new(FaultyStorage::new(world.storage.clone(), 1));
    let engine = world
        .engine_with("n1", manual(), faulty.clone(), Arc::new(Failpoints::new()))
        .await
        .unwrap();
    let id = engine.create_stream().await.unwrap().id;
    let stream = engine.open_stream(id).await.unwrap();
    faulty.set_put_delay(Duration::from_millis(300));
    let pending = stream.append(3, payload(0)).await.unwrap();
    let offsets = stream.offsets();
    assert_eq!((offsets.confirm, offsets.next), (0, 3));
    assert!(
        stream
            .fetch(0, 10, 100, ReadBound::Confirmed)
            .await
            .unwrap()
            .is_empty()
    );
    let log_end = stream
        .fetch(0, 10, 100, ReadBound::NextOffset)
        .await
        .unwrap();
    assert_eq!(log_end.len(), 1);
    let woken = stream.wait_past(0, WAIT);
    let (confirm, durable) = tokio::join!(woken, pending.durable());
    durable.unwrap();
    assert_eq!(confirm, 3);
    // wait_past times out with the confirm offset when nothing comes.
    assert_eq!(stream.wait_past(3, Duration::from_millis(20)).await, 3);
}

/// Node n1's engine with two new streams open: their ids and handles.
async fn two_streams(world: &World) -> (Engine, (u64, Stream), (u64, Stream)) {
    let engine = world.engine("n1", manual()).await;
    let a = engine.create_stream().await.unwrap().id;
    let b = engine.create_stream().await.unwrap().id;
    let sa = engine.open_stream(a).await.unwrap();
    let sb = engine.open_stream(b).await.unwrap();
    (engine, (a, sa), (b, sb))
}

/// The keys under the WAL prefix.
async fn wal_keys(world: &World) -> Vec<String> {
    world
        .storage
        .list("wal/")
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect()
}

/// The WAL keys the metadata does not name as committed objects (adopted WAL objects are).
async fn uncommitted_wal_keys(world: &World) -> Vec<String> {
    let committed: std::collections::HashSet<String> = world
        .metadata()
        .await
        .list_objects()
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    let mut keys = wal_keys(world).await;
    keys.retain(|k| !committed.contains(k));
    keys
}

/// Appends to two streams, crashes, and recovers with `adopt_at_recovery` as given; returns
/// the engine after one more append, how many WAL objects the crash left, and the first
/// stream.
async fn crash_and_recover(world: &World, adopt: bool) -> (Engine, usize, u64) {
    let (engine, (a, sa), (b, sb)) = two_streams(world).await;
    append_n(&sa, 10).await;
    engine.compact_now().await.unwrap();
    append_n(&sa, 10).await;
    append_n(&sb, 7).await;
    // Crash: no shutdown, no close.
    engine.abort();
    drop((sa, sb, engine));
    let left = wal_keys(world).await.len();

    let mut settings = manual();
    settings.compaction.adopt_at_recovery = adopt;
    let engine = world.engine("n1", settings).await;
    assert!(counter(&engine.metrics().recovered_batches) >= 17);
    let sa = engine.open_stream(a).await.unwrap();
    let sb = engine.open_stream(b).await.unwrap();
    assert_eq!(sa.offsets().next, 40, "offsets continue without a gap");
    assert_eq!(sb.offsets().next, 14);
    assert_eq!(read_all(&sa, 0).await, expected(0, 40));
    assert_eq!(read_all(&sb, 0).await, expected(0, 14));
    append_n(&sa, 1).await;
    assert_eq!(read_all(&sa, 38).await, expected(38, 42));
    (engine, left, a)
}

#[tokio::test]
async fn a_crash_loses_nothing_acknowledged() {
    let world = World::new();
    let (engine, left, a) = crash_and_recover(&world, true).await;
    // Each recovered WAL object is committed as it is: nothing is written a second time, and
    // besides them only the new append's WAL object is in the WAL prefix.
    assert_eq!(counter(&engine.metrics().wal_objects_adopted), left as u64);
    assert_eq!(counter(&engine.metrics().wal_objects_deleted), 0);
    assert_eq!(wal_keys(&world).await.len(), left + 1);
    assert_eq!(uncommitted_wal_keys(&world).await.len(), 1);
    // They are read as committed objects once the caches are gone, after another restart.
    engine.shutdown().await.unwrap();
    let engine = world.engine("n1", no_tail_cache()).await;
    let sa = engine.open_stream(a).await.unwrap();
    assert_eq!(read_all(&sa, 0).await, expected(0, 42));
}

#[tokio::test]
async fn a_crash_loses_nothing_acknowledged_when_recovery_writes_everything_anew() {
    let world = World::new();
    let (engine, left, _) = crash_and_recover(&world, false).await;
    assert_eq!(counter(&engine.metrics().wal_objects_adopted), 0);
    assert_eq!(counter(&engine.metrics().wal_objects_deleted), left as u64);
    // The recovered WAL objects are gone; only the new append's WAL object remains.
    assert_eq!(world.storage.list("wal/").await.unwrap().len(), 1);
}

#[tokio::test]
async fn recovery_writes_its_objects_side_by_side() {
    // Six streams, each written into an object of its own by recovery, on a store whose PUTs
    // take a few milliseconds: the PUTs overlap.
    let world = World::new();
    let engine = world.engine("n1", manual()).await;
    let mut streams = Vec::new();
    for _ in 0..6 {
        let id = engine.create_stream().await.unwrap().id;
        let stream = engine.open_stream(id).await.unwrap();
        append_n(&stream, 3).await;
        streams.push((id, stream));
    }
    engine.abort();
    let ids: Vec<u64> = streams.iter().map(|(id, _)| *id).collect();
    drop((streams, engine));

    let slow: Arc<dyn ObjectStorage> = Arc::new(LatencyStorage::new(
        world.storage.clone(),
        LatencyProfile::none().with_put(LatencyDistribution::constant(Duration::from_millis(20))),
        7,
    ));
    let counted = Arc::new(CountingStorage::new(slow));
    let mut settings = manual();
    settings.compaction.stream_object_bytes = 1;
    let engine = world
        .engine_with("n1", settings, counted.clone(), Arc::new(Failpoints::new()))
        .await
        .unwrap();
    assert_eq!(counter(&engine.metrics().objects_written), 6);
    assert!(
        counted.most_puts_in_flight() >= 2,
        "recovery's objects were written one after another"
    );
    for id in ids {
        let stream = engine.open_stream(id).await.unwrap();
        assert_eq!(read_all(&stream, 0).await, expected(0, 6));
    }
}

#[tokio::test]
async fn recovery_reads_past_a_missing_wal_object_and_stops_only_its_streams() {
    let world = World::new();
    let (engine, (a, sa), (b, sb)) = two_streams(&world).await;
    // One WAL object per append, in turn: a, b, a, b, a, b.
    for _ in 0..3 {
        append_n(&sa, 1).await;
        append_n(&sb, 1).await;
    }
    engine.abort();
    drop((sa, sb, engine));
    let mut keys = wal_keys(&world).await;
    keys.sort();
    assert_eq!(keys.len(), 6, "{keys:?}");
    // The third object (a's second append) never landed, as an upload in flight at a crash: a
    // keeps its records before it, b (with nothing in it) keeps everything after it too.
    world.storage.delete(&keys[2]).await.unwrap();
    let engine = world.engine("n1", manual()).await;
    let sa = engine.open_stream(a).await.unwrap();
    let sb = engine.open_stream(b).await.unwrap();
    assert_eq!(read_all(&sa, 0).await, expected(0, 2));
    assert_eq!(sa.offsets().next, 2);
    assert_eq!(read_all(&sb, 0).await, expected(0, 6));
    assert_eq!(sb.offsets().next, 6);
}

#[tokio::test]
async fn a_new_life_of_a_node_recovers_the_earlier_lives_wal() {
    let world = World::new();
    // Life 1 of node n1 appends and crashes.
    let engine = world.engine("n1~1", manual()).await;
    let a = engine.create_stream().await.unwrap().id;
    let sa = engine.open_stream(a).await.unwrap();
    append_n(&sa, 10).await;
    engine.abort();
    drop((sa, engine));
    // Life 2 writes under its own WAL prefix and recovers life 1's first.
    let engine = Engine::builder()
        .node("n1~2")
        .wal_storage(world.storage.clone())
        .metadata(world.metadata().await)
        .settings(manual())
        .recover_earlier(vec!["n1~1".to_owned(), "n1~2".to_owned()])
        .open()
        .await
        .unwrap();
    assert_eq!(counter(&engine.metrics().recovered_batches), 10);
    let sa = engine.open_stream(a).await.unwrap();
    assert_eq!(read_all(&sa, 0).await, expected(0, 20));
    append_n(&sa, 1).await;
    let keys = wal_keys(&world).await;
    assert!(
        !keys.is_empty() && keys.iter().all(|k| k.starts_with("wal/n1~2/")),
        "{keys:?}"
    );
    assert!(
        world
            .metadata()
            .await
            .wal_reservations("n1~1")
            .await
            .unwrap()
            .is_empty(),
        "life 1's WAL ids are retired"
    );
}

#[tokio::test]
async fn an_exclusive_engine_takes_no_stream_another_node_holds_open() {
    let world = World::new();
    let open = |member: &'static str, node_id: &'static str| {
        let world = &world;
        async move {
            Engine::builder()
                .node(member)
                .wal_storage(world.storage.clone())
                .metadata(world.metadata().await)
                .settings(manual())
                .exclusive(node_id)
                .open()
                .await
                .unwrap()
        }
    };
    let a = open("a~1", "a").await;
    let id = a.create_stream().await.unwrap().id;
    let sa = a.open_stream(id).await.unwrap();
    append_n(&sa, 3).await;
    // Another node's member may not take it while a holds it open: nothing changes.
    let b = open("b~1", "b").await;
    let held = b.open_stream(id).await.unwrap_err();
    assert!(held.to_string().contains("a~1"), "{held}");
    let record = world
        .metadata()
        .await
        .get_stream(id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.owner.as_deref(), Some("a~1"));
    // Once a closes it, b takes it with its offsets.
    sa.close().await.unwrap();
    let sb = b.open_stream(id).await.unwrap();
    assert_eq!(read_all(&sb, 0).await, expected(0, 6));
    // A later life of b takes what an earlier one held (its WAL was recovered at open).
    b.abort();
    drop((sb, b));
    let b2 = Engine::builder()
        .node("b~2")
        .wal_storage(world.storage.clone())
        .metadata(world.metadata().await)
        .settings(manual())
        .exclusive("b")
        .recover_earlier(vec!["b~1".to_owned()])
        .open()
        .await
        .unwrap();
    let sb2 = b2.open_stream(id).await.unwrap();
    assert_eq!(read_all(&sb2, 0).await, expected(0, 6));
}

#[tokio::test]
async fn a_survivor_recovers_a_dead_members_wal_and_then_takes_its_streams() {
    // Transactions limited as etcd limits them: the recovery must commit in chunks, so it
    // adopts nothing even when asked to (one transaction could not hold the commit).
    let world = World {
        kv: Arc::new(MemoryKv::with_txn_limit(128)),
        ..World::new()
    };
    let mut settings = manual();
    settings.compaction.adopt_at_recovery = true;
    let open = |member: &'static str, node_id: &'static str| {
        let (world, settings) = (&world, settings.clone());
        async move {
            Engine::builder()
                .node(member)
                .wal_storage(world.storage.clone())
                .metadata(world.metadata().await)
                .settings(settings)
                .exclusive(node_id)
                .open()
                .await
                .unwrap()
        }
    };
    // Member a~1 appends to more streams than one metadata transaction commits, then dies
    // with everything still in its WAL.
    let a = open("a~1", "a").await;
    let mut ids = Vec::new();
    for n in 0..45 {
        let id = a.create_stream().await.unwrap().id;
        let stream = a.open_stream(id).await.unwrap();
        append_n(&stream, 1 + n % 3).await;
        ids.push((id, 2 * (1 + n % 3)));
    }
    a.abort();
    drop(a);
    let b = open("b~1", "b").await;
    let held = b.open_stream(ids[0].0).await.unwrap_err();
    assert!(held.to_string().contains("a~1"), "{held}");
    let metadata = world.metadata().await;
    assert_eq!(
        metadata.claim_recovery("a~1", "b~1", None).await.unwrap(),
        mink_metadata::ClaimOutcome::Claimed
    );
    b.recover_member("a~1").await.unwrap();
    metadata.finish_recovery("a~1", "b~1").await.unwrap();
    let batches: u64 = ids.iter().map(|(_, end)| end / 2).sum();
    assert_eq!(counter(&b.metrics().recovered_batches), batches);
    assert!(metadata.wal_reservations("a~1").await.unwrap().is_empty());
    assert_eq!(counter(&b.metrics().wal_objects_adopted), 0);
    assert!(
        world.storage.list("wal/a~1/").await.unwrap().is_empty(),
        "the dead member's WAL objects are deleted"
    );
    // Every stream it held opens on b with every acknowledged batch at its offset.
    let mut open = Vec::new();
    for (id, end) in ids {
        let stream = b.open_stream(id).await.unwrap();
        assert_eq!(stream.offsets().next, end);
        assert_eq!(read_all(&stream, 0).await, expected(0, end));
        append_n(&stream, 1).await;
        open.push((stream, end + 2));
    }
    // One compaction round over all 45 streams, in chunks within the limit.
    b.compact_now().await.unwrap();
    for (stream, end) in &open {
        assert_eq!(read_all(stream, 0).await, expected(0, *end));
    }
    // Recovering again finds nothing left to do.
    b.recover_member("a~1").await.unwrap();
    assert_eq!(counter(&b.metrics().recovered_batches), batches);
}

#[tokio::test]
async fn a_crash_at_each_failpoint_loses_nothing_acknowledged() {
    for (point, settings) in failpoints::ALL
        .into_iter()
        .flat_map(|p| [(p, manual()), (p, adopting(manual()))])
    {
        let case = format!(
            "{point}, adopting from {} bytes",
            settings.compaction.adopt_wal_object_bytes
        );
        let world = World::new();
        let failpoints = Arc::new(Failpoints::new());
        let engine = world
            .engine_with(
                "n1",
                settings.clone(),
                world.storage.clone(),
                failpoints.clone(),
            )
            .await
            .unwrap();
        let id = engine.create_stream().await.unwrap().id;
        let stream = engine.open_stream(id).await.unwrap();
        append_n(&stream, 6).await;
        failpoints.arm(point);
        let mut acknowledged = 12;
        if point == failpoints::WAL_AFTER_PUT {
            // The PUT lands but the append is never acknowledged.
            let pending = stream.append(2, payload(12)).await.unwrap();
            assert!(pending.durable().await.is_err(), "{case}");
        } else {
            assert!(
                matches!(engine.compact_now().await, Err(StreamError::Failpoint(p)) if p == point),
                "{case}"
            );
            acknowledged = 12;
        }
        assert_eq!(failpoints.fired(), 1, "{case}");
        engine.abort();
        drop((stream, engine));

        let engine = world.engine("n1", settings).await;
        let stream = engine.open_stream(id).await.unwrap();
        let got = read_all(&stream, 0).await;
        // What was acknowledged is there exactly once; an unacknowledged append may be too.
        assert_eq!(got[..6], expected(0, acknowledged)[..], "{case}");
        assert!(got.len() <= 7, "{case}");
        let next = stream.offsets().next;
        assert_eq!(next, got.last().map_or(0, |(o, _)| o + 2), "{case}");
        append_n(&stream, 2).await;
        engine.compact_now().await.unwrap();
        assert_eq!(read_all(&stream, 0).await.len(), got.len() + 2, "{case}");
    }
}

#[tokio::test]
async fn an_older_owner_is_fenced() {
    for settings in [manual(), adopting(manual())] {
        an_older_owner_is_fenced_with(settings).await;
    }
}

async fn an_older_owner_is_fenced_with(settings: EngineSettings) {
    let world = World::new();
    let one = world.engine("n1", settings.clone()).await;
    let two = world.engine("n2", settings).await;
    let id = one.create_stream().await.unwrap().id;
    let old = one.open_stream(id).await.unwrap();
    append_n(&old, 3).await;
    one.compact_now().await.unwrap();
    let new = two.open_stream(id).await.unwrap();
    assert!(new.epoch() > old.epoch());
    assert_eq!(new.offsets().next, 6);
    // The old owner's data, appended after the takeover, can never be committed.
    let pending = old.append(2, payload(6)).await.unwrap();
    pending.durable().await.unwrap();
    assert!(matches!(
        one.compact_now().await,
        Err(StreamError::Fenced { stream_id, .. }) if stream_id == id
    ));
    assert!(matches!(
        old.append(2, payload(8)).await,
        Err(StreamError::Fenced { .. })
    ));
    append_n(&new, 1).await;
    two.compact_now().await.unwrap();
    assert_eq!(read_all(&new, 0).await, expected(0, 8));
}

#[tokio::test]
async fn a_closed_stream_moves_to_another_node_with_its_offsets() {
    let world = World::new();
    let one = world.engine("n1", manual()).await;
    let two = world.engine("n2", manual()).await;
    let id = one.create_stream().await.unwrap().id;
    let stream = one.open_stream(id).await.unwrap();
    append_n(&stream, 4).await;
    stream.close().await.unwrap();
    assert!(matches!(
        stream.append(1, payload(8)).await,
        Err(StreamError::Closed { .. })
    ));
    let moved = two.open_stream(id).await.unwrap();
    assert_eq!(moved.offsets().next, 8);
    assert_eq!(read_all(&moved, 0).await, expected(0, 8));
    moved.destroy().await.unwrap();
    assert!(
        two.open_stream(id).await.is_err(),
        "a destroyed stream cannot be opened"
    );
}

#[tokio::test]
async fn a_stream_closes_while_other_streams_keep_the_wal_busy() {
    // PUTs of a few milliseconds, and another stream with 16 appends always in flight: the WAL
    // is never idle until that load stops, which it does only after 30 s or once the close is
    // over.
    let world = World::new();
    let slow: Arc<dyn ObjectStorage> = Arc::new(LatencyStorage::new(
        world.storage.clone(),
        LatencyProfile::none().with_put(LatencyDistribution::from_p50_p99(
            Duration::from_millis(3),
            Duration::from_millis(12),
        )),
        11,
    ));
    let engine = world
        .engine_with("n1", manual(), slow, Arc::new(Failpoints::new()))
        .await
        .unwrap();
    let a = engine.create_stream().await.unwrap().id;
    let b = engine.create_stream().await.unwrap().id;
    let (sa, sb) = (
        engine.open_stream(a).await.unwrap(),
        engine.open_stream(b).await.unwrap(),
    );
    append_n(&sa, 2).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for _ in 0..16 {
        let (sb, stop) = (sb.clone(), stop.clone());
        load.push(tokio::spawn(async move {
            let until = tokio::time::Instant::now() + Duration::from_secs(30);
            let mut acked = 0u64;
            while !stop.load(Ordering::Relaxed) && tokio::time::Instant::now() < until {
                let pending = sb.append(1, payload(0)).await.unwrap();
                pending.durable().await.unwrap();
                acked += 1;
            }
            acked
        }));
    }
    while sb.offsets().confirm < 200 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The close finds an append of its own stream not yet durable, and waits for that one.
    let last = sa.append(2, payload(4)).await.unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(10), sa.close()).await;
    stop.store(true, Ordering::Relaxed);
    let mut acked = 0;
    for task in load {
        acked += task.await.unwrap();
    }
    closed
        .expect("the close waited for the other stream's load to stop")
        .unwrap();
    assert_eq!(last.durable().await.unwrap(), 4);
    assert!(acked >= 200, "the other stream kept appending ({acked})");
    // The closed stream's batches are all there for the next owner.
    let two = world.engine("n2", manual()).await;
    let moved = two.open_stream(a).await.unwrap();
    assert_eq!(moved.offsets().next, 6);
    assert_eq!(read_all(&moved, 0).await.len(), 3);
}

#[tokio::test]
async fn back_pressure_bounds_uncompacted_bytes() {
    let world = World::new();
    let settings = EngineSettings {
        max_uncompacted_bytes: 8 << 10,
        backpressure_timeout: Duration::from_millis(200),
        ..manual()
    };
    let engine = world.engine("n1", settings).await;
    let id = engine.create_stream().await.unwrap().id;
    let stream = engine.open_stream(id).await.unwrap();
    assert!(matches!(
        stream.append(1, Bytes::from(vec![0u8; 9 << 10])).await,
        Err(StreamError::BatchTooLarge { .. })
    ));
    for _ in 0..8 {
        let pending = stream
            .append(1, Bytes::from(vec![1u8; 1000]))
            .await
            .unwrap();
        pending.durable().await.unwrap();
    }
    // The budget is full, but waiting wakes the compactor, which makes room.
    let pending = stream
        .append(1, Bytes::from(vec![2u8; 1000]))
        .await
        .unwrap();
    pending.durable().await.unwrap();
    assert!(engine.uncompacted_bytes() <= 8 << 10);
    assert_eq!(stream.offsets().confirm, 9);
}

#[tokio::test]
async fn reserved_room_is_spent_by_submit_and_given_back_when_unused() {
    let world = World::new();
    let engine = world.engine("n1", manual()).await;
    let id = engine.create_stream().await.unwrap().id;
    let stream = engine.open_stream(id).await.unwrap();
    assert_eq!(engine.uncompacted_bytes(), 0);

    // A permit dropped unused gives its room back.
    let permit = stream.reserve(16 << 10).await.unwrap();
    assert_eq!(permit.len(), 16 << 10);
    assert_eq!(engine.uncompacted_bytes(), 16 << 10);
    drop(permit);
    assert_eq!(engine.uncompacted_bytes(), 0);

    // A batch larger than its permit is refused and appends nothing.
    let permit = stream.reserve(1000).await.unwrap();
    let refused = stream.submit_at(0, 1, Bytes::from(vec![7u8; 1001]), permit);
    assert!(matches!(
        refused,
        Err(StreamError::PermitTooSmall {
            len: 1001,
            reserved: 1000
        })
    ));
    assert_eq!(stream.offsets().next, 0);
    assert_eq!(engine.uncompacted_bytes(), 0);

    // A batch smaller than its permit keeps only what it needs (whole KiB units).
    let permit = stream.reserve(16 << 10).await.unwrap();
    let pending = stream
        .submit_at(0, 2, Bytes::from(vec![1u8; 3000]), permit)
        .unwrap();
    assert_eq!(engine.uncompacted_bytes(), 3 << 10);
    assert_eq!(pending.await.unwrap(), 0);
    assert_eq!(stream.offsets().confirm, 2);

    // The wrong base offset is refused and its room given back.
    let permit = stream.reserve(100).await.unwrap();
    assert!(matches!(
        stream.submit_at(5, 1, Bytes::from(vec![2u8; 100]), permit),
        Err(StreamError::OffsetMismatch {
            expected: 5,
            next: 2,
            ..
        })
    ));
    assert_eq!(engine.uncompacted_bytes(), 3 << 10);

    // Compaction releases the room of what it committed.
    engine.compact_now().await.unwrap();
    assert_eq!(engine.uncompacted_bytes(), 0);
    assert_eq!(read_all(&stream, 0).await.len(), 1);
}

#[tokio::test]
async fn large_streams_get_stream_objects_and_reads_span_objects() {
    let world = World::new();
    let settings = EngineSettings {
        compaction: CompactionSettings {
            stream_object_bytes: 4 << 10,
            block_bytes: 1 << 10,
            ..manual().compaction
        },
        ..manual()
    };
    let engine = world.engine("n1", settings).await;
    let big = engine.create_stream().await.unwrap().id;
    let small = engine.create_stream().await.unwrap().id;
    let big = engine.open_stream(big).await.unwrap();
    let small = engine.open_stream(small).await.unwrap();
    for round in 0..3u64 {
        for i in 0..20u64 {
            let next = big.offsets().next;
            big.append(2, Bytes::from(vec![(round * 20 + i) as u8; 500]))
                .await
                .unwrap()
                .durable()
                .await
                .unwrap();
            assert_eq!(next % 2, 0);
        }
        append_n(&small, 2).await;
        engine.compact_now().await.unwrap();
    }
    let objects = engine.metadata().list_objects().await.unwrap();
    let stream_objects = objects
        .iter()
        .filter(|o| o.kind == mink_metadata::ObjectKind::Stream)
        .count();
    assert_eq!(stream_objects, 3);
    // A read across the three stream objects, in small steps, returns every batch once.
    let mut cursor = 0;
    let mut seen = 0u64;
    while cursor < big.offsets().confirm {
        let batches = big
            .fetch(cursor, u64::MAX, 1500, ReadBound::Confirmed)
            .await
            .unwrap();
        assert!(batches.len() <= 3);
        for batch in batches {
            assert_eq!(batch.base_offset, cursor);
            assert_eq!(batch.payload[0] as u64, seen);
            seen += 1;
            cursor = batch.end_offset();
        }
    }
    assert_eq!(seen, 60);
    assert_eq!(read_all(&small, 0).await, expected(0, 12));
}

/// Appends `count` durable batches of two offsets each, the `i`-th of 500 bytes `i`.
async fn append_wide(stream: &Stream, count: u8) {
    for i in 0..count {
        stream
            .append(2, Bytes::from(vec![i; 500]))
            .await
            .unwrap()
            .durable()
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_block_read_again_comes_from_the_decoded_blocks_with_the_same_batches() {
    let world = World::new();
    let mut settings = no_tail_cache();
    settings.compaction.block_bytes = 4 << 10;
    // Pages smaller than a block: most batches cross from one page into the next.
    settings.cache.block.page_size = 1 << 10;
    let engine = world.engine("n1", settings).await;
    let id = engine.create_stream().await.unwrap().id;
    let stream = engine.open_stream(id).await.unwrap();
    append_wide(&stream, 20).await;
    engine.compact_now().await.unwrap();
    let hits = || counter(&engine.metrics().decoded_block_hits);
    let gets = || counter(&engine.metrics().object_gets);
    let read = || stream.fetch(0, u64::MAX, 1 << 20, ReadBound::Confirmed);
    let first = read().await.unwrap();
    assert_eq!(first.len(), 20);
    for (i, batch) in first.iter().enumerate() {
        assert_eq!((batch.base_offset, batch.count), (2 * i as u64, 2));
        assert_eq!(batch.payload, Bytes::from(vec![i as u8; 500]));
    }
    assert_eq!(read().await.unwrap(), first);
    assert_eq!(
        hits(),
        0,
        "the first two reads of a block decode it from its pages"
    );
    let loaded = gets();
    assert_eq!(
        read().await.unwrap(),
        first,
        "the same batches, kept decoded"
    );
    assert!(
        hits() >= 3,
        "20 batches of 516 bytes fill 3 blocks: {} hits",
        hits()
    );
    assert_eq!(gets(), loaded);
    // A read that starts inside a kept block takes its batches from the first one it wants.
    let tail = stream
        .fetch(31, u64::MAX, 1 << 20, ReadBound::Confirmed)
        .await
        .unwrap();
    assert_eq!(tail, first[15..].to_vec());
}

#[tokio::test]
async fn a_sequential_reader_finds_the_next_object_loaded_when_it_gets_there() {
    let world = World::new();
    let base = no_tail_cache();
    let settings = EngineSettings {
        compaction: CompactionSettings {
            stream_object_bytes: 4 << 10,
            block_bytes: 1 << 10,
            ..base.compaction.clone()
        },
        ..base
    };
    let engine = world.engine("n1", settings).await;
    let id = engine.create_stream().await.unwrap().id;
    let stream = engine.open_stream(id).await.unwrap();
    // Two stream objects of 20 batches (40 offsets) each.
    for _ in 0..2 {
        append_wide(&stream, 20).await;
        engine.compact_now().await.unwrap();
    }
    let gets = || counter(&engine.metrics().object_gets);
    // Read most of the first object in steps of two batches, as a catch-up reader does (a read
    // that ends at an object's end already looks into the next one, so stop short of it).
    let mut cursor = 0;
    while cursor < 36 {
        let batches = stream
            .fetch(cursor, u64::MAX, 1000, ReadBound::Confirmed)
            .await
            .unwrap();
        cursor = batches.last().unwrap().end_offset();
    }
    assert_eq!(cursor, 36);
    // The next object's loads were started in the background: wait until they are done.
    let mut last = gets();
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = gets();
        if now == last {
            break;
        }
        last = now;
    }
    let before = gets();
    let batches = stream
        .fetch(36, u64::MAX, 1 << 20, ReadBound::Confirmed)
        .await
        .unwrap();
    assert_eq!(batches.last().unwrap().end_offset(), 80);
    assert_eq!(
        gets(),
        before,
        "the second object's index and data were loaded before the reader reached it"
    );
}

/// One stream object of 400 batches (about 200 KiB, so its index's tail read of 64 KiB holds
/// none of the first blocks) in blocks of one batch each, pages of 256 bytes (so each block is a
/// load of its own when it is read alone), a readahead window of a few blocks, and empty caches.
async fn one_object_of_small_blocks(world: &World) -> (Engine, Stream) {
    let mut settings = no_tail_cache();
    settings.compaction.stream_object_bytes = 1 << 20;
    settings.compaction.block_bytes = 1 << 10;
    settings.cache.block.page_size = 256;
    settings.cache.readahead.start_bytes = 4 << 10;
    settings.cache.readahead.growth_bytes = 4 << 10;
    settings.cache.readahead.max_bytes = 8 << 10;
    let engine = world.engine("n1", settings).await;
    let id = engine.create_stream().await.unwrap().id;
    let stream = engine.open_stream(id).await.unwrap();
    append_wide(&stream, 200).await;
    append_wide(&stream, 200).await;
    engine.compact_now().await.unwrap();
    (engine, stream)
}

#[tokio::test]
async fn a_new_readers_first_read_loads_what_it_asked_for_at_once() {
    let world = World::new();
    let (engine, stream) = one_object_of_small_blocks(&world).await;
    let batches = stream
        .fetch(0, u64::MAX, 32 << 10, ReadBound::Confirmed)
        .await
        .unwrap();
    assert!(batches.len() >= 60, "{} batches", batches.len());
    let cache = engine.cache_metrics();
    // The index, the 32 KiB asked for in one load, and readahead past them once the window has
    // opened (5 in all when written); a window opening at 4 KiB and growing to 8 KiB, without
    // the first load, took 19 loads, most of them one after another.
    assert!(cache.loads <= 8, "{cache:?}");
}

#[tokio::test]
async fn two_readers_of_one_stream_each_keep_their_own_readahead() {
    let world = World::new();
    let (engine, stream) = one_object_of_small_blocks(&world).await;
    // Two consumers, one from the start and one from the middle, in turn, one batch (one block)
    // a read. (A read that runs on past its last batch reads the next block too, and its own
    // second block would open a window whatever came before.)
    let mut cursors = [0u64, 400];
    for _ in 0..16 {
        for cursor in cursors.iter_mut() {
            let batches = stream
                .fetch(*cursor, *cursor + 2, 1 << 20, ReadBound::Confirmed)
                .await
                .unwrap();
            assert_eq!(batches.len(), 1);
            assert_eq!(batches[0].base_offset, *cursor);
            *cursor = batches[0].end_offset();
        }
    }
    assert_eq!(cursors, [32, 432]);
    let cache = engine.cache_metrics();
    // Each reader's second read continues its first, so each opens a window; had they shared one
    // state, each read would follow the other reader's and look random, and each block would be
    // loaded as that read asked for it.
    assert!(cache.readahead_loads >= 2, "{cache:?}");
    // Each reader went through 16 blocks. Read ahead, a load holds several of them; without
    // readahead each of the 32 is a load of its own (besides the index's).
    assert!(cache.loads <= 16, "{cache:?}");
}

#[tokio::test]
async fn a_tail_reader_is_served_from_the_tail_cache_without_gets() {
    let world = World::new();
    let engine = world.engine("n1", manual()).await;
    let id = engine.create_stream().await.unwrap().id;
    let stream = engine.open_stream(id).await.unwrap();
    let mut cursor = 0;
    for round in 0..50u64 {
        append_n(&stream, 2).await;
        if round % 10 == 9 {
            engine.compact_now().await.unwrap();
        }
        let batches = stream
            .fetch(cursor, u64::MAX, 1 << 20, ReadBound::Confirmed)
            .await
            .unwrap();
        assert_eq!(batches.len(), 2);
        cursor = batches[1].end_offset();
    }
    let gets = world.storage.counts().gets;
    assert_eq!(gets, 0, "a reader at the tail never reads the object store");
    let cache = engine.cache_metrics();
    assert!(cache.tail_hits >= 50, "{cache:?}");
}

/// [`manual`] with merging after three small objects and no grace period before deletion.
fn eager_maintenance() -> EngineSettings {
    let mut settings = no_tail_cache();
    settings.compaction.stream_object_bytes = 1;
    settings.compaction.merge_min_objects = 3;
    settings.compaction.delete_grace = Duration::ZERO;
    settings
}

#[tokio::test]
async fn small_stream_objects_are_merged_and_reads_still_see_everything() {
    let world = World::new();
    let mut settings = eager_maintenance();
    // Every stream's round gets its own (small) stream object.
    settings.compaction.stream_object_bytes = 1;
    let engine = world.engine("n1", settings.clone()).await;
    let id = engine.create_stream().await.unwrap().id;
    let stream = engine.open_stream(id).await.unwrap();
    for _ in 0..5 {
        append_n(&stream, 3).await;
        engine.compact_now().await.unwrap();
    }
    let before = engine.metadata().list_objects().await.unwrap();
    assert_eq!(before.len(), 5);
    // Raise the threshold so the five objects count as small, then merge.
    drop((stream, engine));
    settings.compaction.stream_object_bytes = 1 << 20;
    let engine = world.engine("n1", settings).await;
    let stream = engine.open_stream(id).await.unwrap();
    engine.maintain_now().await.unwrap();
    let after = engine.metadata().list_objects().await.unwrap();
    assert_eq!(after.len(), 1, "five small stream objects became one");
    assert_eq!(after[0].ranges[0].start_offset, 0);
    assert_eq!(after[0].ranges[0].end_offset, 30);
    assert_eq!(read_all(&stream, 0).await, expected(0, 30));
    // The replaced objects are gone from the store.
    let data = world.storage.list("data/").await.unwrap();
    assert_eq!(data.len(), 1);
    assert_eq!(
        engine
            .metrics()
            .merges
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[tokio::test]
async fn trimmed_and_deleted_objects_are_collected() {
    let world = World::new();
    let engine = world.engine("n1", eager_maintenance()).await;
    let a = engine.create_stream().await.unwrap().id;
    let b = engine.create_stream().await.unwrap().id;
    let sa = engine.open_stream(a).await.unwrap();
    let sb = engine.open_stream(b).await.unwrap();
    append_n(&sa, 2).await;
    engine.compact_now().await.unwrap();
    append_n(&sa, 2).await;
    append_n(&sb, 2).await;
    engine.compact_now().await.unwrap();
    assert_eq!(engine.metadata().list_objects().await.unwrap().len(), 3);
    // Trimming a past its first object makes that object garbage; the others hold live data.
    sa.trim(4).await.unwrap();
    engine.maintain_now().await.unwrap();
    let objects = engine.metadata().list_objects().await.unwrap();
    assert_eq!(objects.len(), 2);
    assert_eq!(world.storage.list("data/").await.unwrap().len(), 2);
    assert_eq!(read_all(&sa, 4).await, expected(4, 8));
    // Destroying b makes its object garbage too.
    sb.destroy().await.unwrap();
    engine.maintain_now().await.unwrap();
    assert_eq!(engine.metadata().list_objects().await.unwrap().len(), 1);
    assert_eq!(world.storage.list("data/").await.unwrap().len(), 1);
    assert_eq!(read_all(&sa, 4).await, expected(4, 8));
}

/// Appends `payload` as one batch of 2 offsets and waits until it is durable; returns its base.
async fn append_bytes(stream: &Stream, payload: Bytes) -> u64 {
    let pending = stream.append(2, payload).await.unwrap();
    let base = pending.base_offset;
    tokio::time::timeout(WAIT, pending.durable())
        .await
        .unwrap()
        .unwrap();
    base
}

fn counter(value: &std::sync::atomic::AtomicU64) -> u64 {
    value.load(std::sync::atomic::Ordering::Relaxed)
}

#[tokio::test]
async fn large_wal_objects_are_committed_as_they_are() {
    let world = World::new();
    let mut settings = adopting(no_tail_cache());
    settings.wal.max_inflight_puts = 1;
    let slow = Arc::new(FaultyStorage::new(world.storage.clone(), 1));
    slow.set_put_delay(Duration::from_millis(5));
    let engine = world
        .engine_with("n1", settings.clone(), slow, Arc::new(Failpoints::new()))
        .await
        .unwrap();
    let a = engine.create_stream().await.unwrap().id;
    let b = engine.create_stream().await.unwrap().id;
    let sa = engine.open_stream(a).await.unwrap();
    let sb = engine.open_stream(b).await.unwrap();
    // Appends to both streams in flight together behind one slow PUT at a time, so WAL objects
    // mix the streams.
    for round in 0..10u64 {
        let mut pending = Vec::new();
        for i in 0..4 {
            let offset = round * 8 + i * 2;
            pending.push(sa.append(2, payload(offset)).await.unwrap());
            pending.push(sb.append(2, payload(offset)).await.unwrap());
        }
        for p in pending {
            p.durable().await.unwrap();
        }
    }
    let wal_objects = world.storage.list("wal/").await.unwrap();
    let puts = world.storage.counts().puts;
    engine.compact_now().await.unwrap();
    assert_eq!(
        world.storage.counts().puts,
        puts,
        "compaction wrote no object"
    );
    assert_eq!(
        counter(&engine.metrics().wal_objects_adopted),
        wal_objects.len() as u64
    );
    assert_eq!(counter(&engine.metrics().wal_objects_deleted), 0);
    assert_eq!(world.storage.list("wal/").await.unwrap(), wal_objects);
    assert!(world.storage.list("data/").await.unwrap().is_empty());
    let objects = engine.metadata().list_objects().await.unwrap();
    assert_eq!(objects.len(), wal_objects.len());
    assert!(objects.iter().all(|o| o.key.starts_with("wal/n1/")));
    assert!(
        objects.iter().any(|o| o.ranges.len() == 2),
        "some WAL object holds both streams"
    );
    assert_eq!(engine.uncompacted_bytes(), 0);

    // A fresh engine (empty caches, nothing to recover) reads it all from the adopted objects.
    engine.abort();
    drop((sa, sb, engine));
    let engine = world.engine("n1", settings).await;
    assert_eq!(counter(&engine.metrics().recovered_batches), 0);
    let sa = engine.open_stream(a).await.unwrap();
    let sb = engine.open_stream(b).await.unwrap();
    assert_eq!(read_all(&sa, 0).await, expected(0, 80));
    assert_eq!(read_all(&sb, 0).await, expected(0, 80));
    assert!(counter(&engine.metrics().object_gets) > 0);

    // Trimmed away, they are collected like any other committed object.
    sa.trim(80).await.unwrap();
    sb.trim(80).await.unwrap();
    let mut eager = adopting(eager_maintenance());
    eager.compaction.stream_object_bytes = u64::MAX;
    drop((sa, sb, engine));
    let engine = world.engine("n1", eager).await;
    engine.maintain_now().await.unwrap();
    assert!(engine.metadata().list_objects().await.unwrap().is_empty());
    assert!(world.storage.list("wal/").await.unwrap().is_empty());
}

#[tokio::test]
async fn small_wal_objects_are_rewritten_between_adopted_ones() {
    let world = World::new();
    let mut settings = no_tail_cache();
    settings.compaction.adopt_wal_object_bytes = 1000;
    let engine = world.engine("n1", settings.clone()).await;
    let a = engine.create_stream().await.unwrap().id;
    let b = engine.create_stream().await.unwrap().id;
    let sa = engine.open_stream(a).await.unwrap();
    let sb = engine.open_stream(b).await.unwrap();
    // One WAL object per append (each waits for the last): large, small, small, large, ...
    let mut written: Vec<(u64, u64, Bytes)> = Vec::new();
    for i in 0..12u8 {
        let (stream, id) = if i % 2 == 0 { (&sa, a) } else { (&sb, b) };
        let len = if i % 3 == 0 { 2000 } else { 100 };
        let bytes = Bytes::from(vec![i; len]);
        let base = append_bytes(stream, bytes.clone()).await;
        written.push((id, base, bytes));
    }
    engine.compact_now().await.unwrap();
    let metrics = engine.metrics();
    assert_eq!(counter(&metrics.wal_objects_adopted), 4, "the 4 large ones");
    assert_eq!(counter(&metrics.wal_objects_deleted), 8, "the 8 small ones");
    let objects = engine.metadata().list_objects().await.unwrap();
    let adopted = objects.iter().filter(|o| o.key.starts_with("wal/")).count();
    assert_eq!(adopted, 4);
    // Small objects between two large ones are rewritten together: one object per run.
    assert_eq!(objects.len() - adopted, 4);
    assert_eq!(world.storage.list("wal/").await.unwrap().len(), 4);

    engine.abort();
    drop((sa, sb, engine));
    let engine = world.engine("n1", settings).await;
    for (id, stream) in [
        (a, engine.open_stream(a).await.unwrap()),
        (b, engine.open_stream(b).await.unwrap()),
    ] {
        let want: Vec<(u64, Bytes)> = written
            .iter()
            .filter(|(s, _, _)| *s == id)
            .map(|(_, base, bytes)| (*base, bytes.clone()))
            .collect();
        assert_eq!(read_all(&stream, 0).await, want, "stream {id}");
    }
}

#[tokio::test]
async fn deleting_a_rounds_wal_objects_does_not_hold_up_the_next_round() {
    let world = World::new();
    let mut settings = no_tail_cache();
    // Background rounds, every WAL object rewritten (so each round has objects to delete).
    settings.compaction.interval = Duration::from_millis(10);
    let store = Arc::new(FaultyStorage::new(world.storage.clone(), 1));
    store.hold_deletes(true);
    let engine = world
        .engine_with("n1", settings, store.clone(), Arc::new(Failpoints::new()))
        .await
        .unwrap();
    let id = engine.create_stream().await.unwrap().id;
    let stream = engine.open_stream(id).await.unwrap();
    let until = async |done: &dyn Fn() -> bool, what: &str| {
        tokio::time::timeout(WAIT, async {
            while !done() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{what}"));
    };
    append_n(&stream, 3).await;
    until(
        &|| engine.uncompacted_bytes() == 0 && counter(&engine.metrics().compactions) > 0,
        "the first round commits with its deletion held",
    )
    .await;
    // The next round commits and gives its room back while the first round's deletion waits.
    append_n(&stream, 3).await;
    until(
        &|| engine.uncompacted_bytes() == 0,
        "the second round commits while the first round's deletion is held",
    )
    .await;
    assert_eq!(counter(&engine.metrics().wal_objects_deleted), 0);
    assert_eq!(world.storage.list("wal/").await.unwrap().len(), 6);
    // Released, the deletions finish; compacting now waits for them.
    store.hold_deletes(false);
    engine.compact_now().await.unwrap();
    assert_eq!(counter(&engine.metrics().wal_objects_deleted), 6);
    assert!(world.storage.list("wal/").await.unwrap().is_empty());
    assert_eq!(read_all(&stream, 0).await, expected(0, 12));
}

#[tokio::test]
async fn wal_objects_are_rewritten_when_committed_objects_go_elsewhere() {
    let world = World::new();
    let data: Arc<dyn ObjectStorage> = Arc::new(ObjectStoreBackend::memory());
    let engine = Engine::builder()
        .node("n1")
        .wal_storage(world.storage.clone())
        .data_storage(data.clone())
        .metadata(world.metadata().await)
        .settings(adopting(no_tail_cache()))
        .open()
        .await
        .unwrap();
    let id = engine.create_stream().await.unwrap().id;
    let stream = engine.open_stream(id).await.unwrap();
    append_n(&stream, 5).await;
    engine.compact_now().await.unwrap();
    assert_eq!(counter(&engine.metrics().wal_objects_adopted), 0);
    assert!(world.storage.list("wal/").await.unwrap().is_empty());
    assert_eq!(data.list("data/").await.unwrap().len(), 1);
    assert_eq!(read_all(&stream, 0).await, expected(0, 10));
}

#[tokio::test]
async fn stream_set_objects_are_regrouped_by_stream() {
    let world = World::new();
    let mut settings = no_tail_cache();
    settings.compaction.stream_object_bytes = 2000;
    settings.compaction.merge_min_objects = 3;
    settings.compaction.delete_grace = Duration::ZERO;
    let engine = world.engine("n1", settings.clone()).await;
    let mut ids = Vec::new();
    let mut streams = Vec::new();
    for _ in 0..4 {
        let id = engine.create_stream().await.unwrap().id;
        ids.push(id);
        streams.push(engine.open_stream(id).await.unwrap());
    }
    let (a, b, c, d) = (&streams[0], &streams[1], &streams[2], &streams[3]);
    let mut written: HashMap<u64, Vec<(u64, Bytes)>> = HashMap::new();
    // Five compaction rounds. `a` is busy (1200 bytes a round: small in a round, large over
    // five); `b` writes one large batch in round 2, which gets its own stream object then.
    for round in 0..5u8 {
        let mut jobs: Vec<(&Stream, Bytes)> = (0..4)
            .map(|i| (a, Bytes::from(vec![round * 10 + i; 300])))
            .collect();
        let b_len = if round == 2 { 2500 } else { 10 };
        jobs.push((b, Bytes::from(vec![100 + round; b_len])));
        jobs.push((c, Bytes::from(vec![150 + round; 10])));
        jobs.push((d, Bytes::from(vec![200 + round; 10])));
        for (stream, bytes) in jobs {
            let base = append_bytes(stream, bytes.clone()).await;
            written.entry(stream.id()).or_default().push((base, bytes));
        }
        engine.compact_now().await.unwrap();
    }
    let sets = |objects: &[mink_metadata::ObjectRecord]| {
        objects
            .iter()
            .filter(|o| o.kind == mink_metadata::ObjectKind::StreamSet)
            .count()
    };
    assert_eq!(sets(&engine.metadata().list_objects().await.unwrap()), 5);
    // `c` trimmed past its first batch, `d` deleted: their dead data is not written again.
    c.trim(2).await.unwrap();
    d.destroy().await.unwrap();
    engine.maintain_now().await.unwrap();
    assert_eq!(counter(&engine.metrics().set_compactions), 1);

    let objects = engine.metadata().list_objects().await.unwrap();
    let holding = |id: u64| -> Vec<(mink_metadata::ObjectKind, u64, u64)> {
        let mut ranges: Vec<_> = objects
            .iter()
            .flat_map(|o| {
                o.ranges
                    .iter()
                    .filter(move |r| r.stream_id == id)
                    .map(move |r| (o.kind, r.start_offset, r.end_offset))
            })
            .collect();
        ranges.sort_by_key(|r| r.1);
        ranges
    };
    use mink_metadata::ObjectKind::{Stream as Own, StreamSet as Set};
    assert_eq!(holding(ids[0]), [(Own, 0, 40)], "a: one stream object");
    assert_eq!(
        holding(ids[1]),
        [(Set, 0, 4), (Own, 4, 6), (Set, 6, 10)],
        "b: two runs around its own stream object"
    );
    assert_eq!(holding(ids[2]), [(Set, 2, 10)], "c: from its start offset");
    assert!(holding(ids[3]).is_empty(), "d: deleted");
    assert_eq!(sets(&objects), 2, "one stream-set object per run of b");
    // The five regrouped objects are gone from the store.
    let keys = world.storage.list("data/").await.unwrap();
    assert_eq!(keys.len(), objects.len());

    engine.abort();
    drop((streams, engine));
    let engine = world.engine("n1", settings).await;
    for (i, id) in ids.iter().take(3).enumerate() {
        let stream = engine.open_stream(*id).await.unwrap();
        let from = if i == 2 { 2 } else { 0 };
        let want: Vec<(u64, Bytes)> = written[id]
            .iter()
            .filter(|(base, _)| *base >= from)
            .cloned()
            .collect();
        assert_eq!(read_all(&stream, from).await, want, "stream {id}");
    }
}

#[tokio::test]
async fn regrouping_leaves_large_stream_set_objects_alone() {
    let world = World::new();
    let mut settings = no_tail_cache();
    settings.compaction.merge_min_objects = 3;
    settings.compaction.delete_grace = Duration::ZERO;
    settings.compaction.set_compaction_bytes = 8000;
    let engine = world.engine("n1", settings).await;
    let a = engine.create_stream().await.unwrap().id;
    let b = engine.create_stream().await.unwrap().id;
    let (sa, sb) = (
        engine.open_stream(a).await.unwrap(),
        engine.open_stream(b).await.unwrap(),
    );
    // The oldest stream-set object is large (at least half the budget), three later ones small.
    append_bytes(&sa, Bytes::from(vec![1u8; 5000])).await;
    append_bytes(&sb, Bytes::from(vec![2u8; 10])).await;
    engine.compact_now().await.unwrap();
    for i in 0..3u8 {
        append_bytes(&sa, Bytes::from(vec![i; 10])).await;
        append_bytes(&sb, Bytes::from(vec![i; 10])).await;
        engine.compact_now().await.unwrap();
    }
    let before = engine.metadata().list_objects().await.unwrap();
    assert_eq!(before.len(), 4);
    let large = before.iter().min_by_key(|o| o.id).unwrap().clone();
    assert!(large.size >= 4000);
    engine.maintain_now().await.unwrap();
    assert_eq!(counter(&engine.metrics().set_compactions), 1);
    let after = engine.metadata().list_objects().await.unwrap();
    assert_eq!(after.len(), 2, "the three small ones became one");
    assert!(after.contains(&large), "the large one is left as it is");
    assert_eq!(read_all(&sa, 0).await.len(), 4);
    assert_eq!(read_all(&sb, 0).await.len(), 4);
}

#[tokio::test]
async fn compacted_objects_are_cut_at_max_object_bytes() {
    let world = World::new();
    let mut settings = no_tail_cache();
    settings.compaction.max_object_bytes = 100;
    let engine = world.engine("n1", settings.clone()).await;
    let a = engine.create_stream().await.unwrap().id;
    let b = engine.create_stream().await.unwrap().id;
    let (sa, sb) = (
        engine.open_stream(a).await.unwrap(),
        engine.open_stream(b).await.unwrap(),
    );
    for i in 0..10u8 {
        append_bytes(&sa, Bytes::from(vec![i; 40])).await;
        append_bytes(&sb, Bytes::from(vec![i; 40])).await;
    }
    engine.compact_now().await.unwrap();
    let objects = engine.metadata().list_objects().await.unwrap();
    // 800 bytes of batches, at most two 40-byte batches per 100-byte object.
    assert_eq!(objects.len(), 10);
    for object in &objects {
        let held: u64 = object
            .ranges
            .iter()
            .map(|r| (r.end_offset - r.start_offset) / 2 * 40)
            .sum();
        assert!(
            held <= 100,
            "object {} holds {held} bytes of batches",
            object.id
        );
    }
    engine.abort();
    drop((sa, sb, engine));
    let engine = world.engine("n1", settings).await;
    for id in [a, b] {
        let stream = engine.open_stream(id).await.unwrap();
        let got = read_all(&stream, 0).await;
        let want: Vec<(u64, Bytes)> = (0..10u8)
            .map(|i| (u64::from(i) * 2, Bytes::from(vec![i; 40])))
            .collect();
        assert_eq!(got, want, "stream {id}");
    }
}
