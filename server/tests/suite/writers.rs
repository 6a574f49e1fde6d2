//! Idempotent writers: writer ids are unique, a retried (writer, sequence) is answered as a
//! duplicate with the first offsets and appends nothing, a gap in sequences is refused, in
//! NDJSON (sequence in headers) and in mink batches (sequence in the batch header).

use mink_codec::BatchMeta;
use reqwest::StatusCode;
use serde_json::Value;

use super::data::{ids_of, mink_batch};
use super::harness::{Backend, Harness, MINK_BATCHES, expect_error};

pub async fn idempotent_retries(backend: Backend) {
    let h = Harness::start(backend).await;
    h.create_table("w").await;
    let writer = h.writer_id().await;
    let w2 = h.writer_id().await;
    assert_ne!(w2, writer, "ids are unique");

    let send = |seq: i32, ids: Vec<i64>| {
        let h = &h;
        async move { h.append_as("w", writer, seq, &ids).await }
    };
    let first: Value = send(0, vec![1, 2]).await.json().await.unwrap();
    assert_eq!(first["duplicate"], false);
    let retry: Value = send(0, vec![1, 2]).await.json().await.unwrap();
    assert_eq!(retry["duplicate"], true);
    assert_eq!(retry["base_offset"], first["base_offset"]);
    assert_eq!(retry["last_offset"], first["last_offset"]);

    let body = expect_error(
        send(2, vec![9]).await,
        StatusCode::CONFLICT,
        "out_of_order_sequence",
    )
    .await;
    assert_eq!(body["expected_sequence"], 1);

    let next: Value = send(1, vec![3]).await.json().await.unwrap();
    assert_eq!(next["base_offset"], 2);

    // The same through mink batches, sequence in the batch header.
    let batch = mink_batch(&[4], BatchMeta::new(1).with_writer(writer as i64, 2));
    for expect_dup in [false, true] {
        let r: Value = h
            .append("w", MINK_BATCHES, batch.clone())
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(r["duplicate"], expect_dup);
        assert_eq!(r["base_offset"], 3);
    }
    let (all, _) = h.read_ndjson("w", "offset=0").await;
    assert_eq!(ids_of(&all), vec![1, 2, 3, 4], "retries appended nothing");
    assert_eq!(h.metric("mink_append_duplicates_total").await, 2.0);
}
