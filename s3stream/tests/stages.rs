//! The stages of an append reported to a [`StageObserver`]: each append passes each stage once,
//! a PUT's time shows up as the put stage of its appends, and an append that waits for a PUT slot
//! shows the wait in its WAL queue stage.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use mink_metadata::{MemoryKv, Metadata, MetadataOptions};
use mink_s3stream::storage::{FaultyStorage, ObjectStoreBackend};
use mink_s3stream::{AppendStage, Engine, ObjectStorage, StageObserver, WalSettings};

#[expect(
    dead_code,
    reason = "this test takes only the settings and the wait of the shared helpers"
)]
mod common;

use common::{WAIT, manual};

#[derive(Debug, Default)]
struct Recorder {
    seen: Mutex<Vec<(AppendStage, Duration)>>,
}

impl StageObserver for Recorder {
    fn observe(&self, stage: AppendStage, elapsed: Duration, count: usize) {
        let mut seen = self.seen.lock().unwrap();
        for _ in 0..count {
            seen.push((stage, elapsed));
        }
    }
}

impl Recorder {
    fn of(&self, stage: AppendStage) -> Vec<Duration> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|(s, _)| *s == stage)
            .map(|(_, d)| *d)
            .collect()
    }
}

#[tokio::test]
async fn every_append_passes_every_stage_once_and_waits_show_where_they_happen() {
    const PUT_DELAY: Duration = Duration::from_millis(40);
    let memory: Arc<dyn ObjectStorage> = Arc::new(ObjectStoreBackend::memory());
    let faulty = Arc::new(FaultyStorage::new(memory, 1));
    let metadata = Arc::new(
        Metadata::open(Arc::new(MemoryKv::new()), MetadataOptions::default())
            .await
            .unwrap(),
    );
    let recorder = Arc::new(Recorder::default());
    let mut settings = manual();
    // One PUT at a time: the second append must wait for the first one's PUT.
    settings.wal = WalSettings {
        max_inflight_puts: 1,
        ..WalSettings::default()
    };
    let engine = Engine::builder()
        .node("n1")
        .wal_storage(faulty.clone())
        .metadata(metadata)
        .settings(settings)
        .stage_observer(recorder.clone())
        .open()
        .await
        .unwrap();
    let stream = engine
        .open_stream(engine.create_stream().await.unwrap().id)
        .await
        .unwrap();
    faulty.set_put_delay(PUT_DELAY);

    let first = stream.append(1, Bytes::from_static(b"a")).await.unwrap();
    let second = stream.append(1, Bytes::from_static(b"b")).await.unwrap();
    tokio::time::timeout(WAIT, first).await.unwrap().unwrap();
    tokio::time::timeout(WAIT, second).await.unwrap().unwrap();

    for stage in AppendStage::ALL {
        assert_eq!(
            recorder.of(stage).len(),
            2,
            "{} observed once per append",
            stage.name()
        );
    }
    // Each append rode its own PUT, each at least the injected delay.
    for put in recorder.of(AppendStage::Put) {
        assert!(put >= PUT_DELAY, "a PUT stage of {put:?}");
    }
    // The second waited for the only PUT slot while the first one's PUT ran.
    let queued = recorder.of(AppendStage::WalQueue);
    assert!(
        queued.iter().any(|q| *q >= PUT_DELAY),
        "one append waited for the PUT slot: {queued:?}"
    );
    assert_eq!(stream.offsets().confirm, 2);
}
