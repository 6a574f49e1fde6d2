//! Shared fixtures: in-memory storage and metadata that outlive engines, batches, tablets.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;
use mink_codec::{BatchMeta, encode_batch};
use mink_metadata::{MemoryKv, MetaKv, Metadata, MetadataOptions};
use mink_s3stream::engine::{CompactionSettings, Engine, EngineSettings};
use mink_s3stream::storage::{ObjectStorage, ObjectStoreBackend};
use mink_tablet::{Clock, ManualClock, StaticSchemas, Tablet, TabletId, TabletSettings};

pub const WAIT: Duration = Duration::from_secs(20);
pub const SCHEMA_ID: i16 = 1;

/// Storage and metadata that outlive engines, as a bucket and an etcd outlive a process.
pub struct World {
    pub kv: Arc<dyn MetaKv>,
    pub storage: Arc<dyn ObjectStorage>,
}

impl World {
    pub fn new() -> Self {
        Self::with_storage(Arc::new(ObjectStoreBackend::memory()))
    }

    pub fn with_storage(storage: Arc<dyn ObjectStorage>) -> Self {
        World {
            kv: Arc::new(MemoryKv::new()),
            storage,
        }
    }

    pub async fn metadata(&self) -> Arc<Metadata> {
        Arc::new(
            Metadata::open(self.kv.clone(), MetadataOptions::default())
                .await
                .unwrap(),
        )
    }

    pub async fn engine(&self, node: &str) -> Engine {
        self.engine_with(node, manual()).await
    }

    pub async fn engine_with(&self, node: &str, settings: EngineSettings) -> Engine {
        Engine::builder()
            .node(node)
            .wal_storage(self.storage.clone())
            .metadata(self.metadata().await)
            .settings(settings)
            .open()
            .await
            .unwrap()
    }
}

/// Engine settings with the background compactor effectively off.
pub fn manual() -> EngineSettings {
    EngineSettings {
        compaction: CompactionSettings {
            interval: Duration::from_secs(3600),
            trigger_bytes: u64::MAX,
            ..CompactionSettings::default()
        },
        ..EngineSettings::default()
    }
}

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]))
}

pub fn schemas() -> Arc<StaticSchemas> {
    Arc::new(StaticSchemas::with_schemas([(SCHEMA_ID, schema())]))
}

/// A batch of `rows` rows (ids `first..first + rows`) for `writer` (-1: none) at `sequence`.
pub fn batch_from(first: i64, rows: usize, writer: i64, sequence: i32) -> Vec<u8> {
    let ids: Vec<i64> = (first..first + rows as i64).collect();
    let names: Vec<String> = ids.iter().map(|i| format!("row-{i}")).collect();
    let rows = RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(StringArray::from(names)),
        ],
    )
    .unwrap();
    encode_batch(
        &rows,
        None,
        BatchMeta::new(SCHEMA_ID).with_writer(writer, sequence),
    )
    .unwrap()
}

pub fn batch(rows: usize, writer: i64, sequence: i32) -> Bytes {
    Bytes::from(batch_from(0, rows, writer, sequence))
}

pub fn plain(rows: usize) -> Bytes {
    batch(rows, -1, -1)
}

pub fn concat(parts: &[Bytes]) -> Bytes {
    Bytes::from(
        parts
            .iter()
            .flat_map(|p| p.iter().copied())
            .collect::<Vec<u8>>(),
    )
}

pub fn id() -> TabletId {
    TabletId::new("orders", "default", 0)
}

pub struct Opened {
    pub tablet: Tablet,
    pub clock: Arc<ManualClock>,
}

pub async fn open(engine: &Engine, settings: TabletSettings) -> Tablet {
    open_with(
        engine,
        settings,
        Arc::new(ManualClock::new(1_000_000)),
        None,
    )
    .await
}

pub async fn open_with(
    engine: &Engine,
    settings: TabletSettings,
    clock: Arc<dyn Clock>,
    layer: Option<mink_tablet::StreamLayer>,
) -> Tablet {
    let mut builder = Tablet::builder(id())
        .engine(engine.clone())
        .schemas(schemas())
        .clock(clock)
        .settings(settings);
    if let Some(layer) = layer {
        builder = builder.stream_layer(layer);
    }
    builder.open_or_create().await.unwrap()
}
