//! Appends in each format (NDJSON, mink batches, Arrow IPC) and reads back in each format, with
//! the read bounds (`until`, `max_bytes`) and the separate log of each bucket.

use arrow_array::{Int64Array, RecordBatch};
use mink_codec::{BatchMeta, batches};
use reqwest::StatusCode;

use super::data::{arrow_reader, ids_of, mink_batch, ndjson, rows, schema};
use super::harness::{ARROW, Backend, Harness, MINK_BATCHES, header};

pub async fn append_and_read_each_format(backend: Backend) {
    let h = Harness::start(backend).await;
    h.create_table("t").await;

    // NDJSON in.
    let a = h.append_ndjson("t", &ndjson(&[1, 2])).await;
    assert_eq!(
        (a["base_offset"].as_u64(), a["last_offset"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(a["duplicate"], false);
    assert!(a["commit_timestamp"].as_i64().unwrap() > 1_600_000_000_000);

    // Mink batches in (two batches in one request).
    let mut body = mink_batch(&[3], BatchMeta::new(1));
    body.extend(mink_batch(&[4, 5], BatchMeta::new(1)));
    let b = h.append_ok("t", MINK_BATCHES, body).await;
    assert_eq!(
        (b["base_offset"].as_u64(), b["last_offset"].as_u64()),
        (Some(2), Some(4))
    );

    // Arrow IPC in.
    let ipc = {
        let mut w = arrow_ipc::writer::StreamWriter::try_new(Vec::new(), &schema()).unwrap();
        w.write(&rows(&[6])).unwrap();
        w.write(&rows(&[7])).unwrap();
        w.finish().unwrap();
        w.into_inner().unwrap()
    };
    let c = h.append_ok("t", ARROW, ipc).await;
    assert_eq!(
        (c["base_offset"].as_u64(), c["last_offset"].as_u64()),
        (Some(5), Some(6))
    );

    // NDJSON out.
    let (all, headers) = h.read_ndjson("t", "offset=0").await;
    assert_eq!(ids_of(&all), vec![1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(all[0]["msg"], "m1");
    assert_eq!(header(&headers, "mink-next-offset").as_deref(), Some("7"));
    assert_eq!(
        header(&headers, "mink-high-watermark").as_deref(),
        Some("7")
    );
    assert_eq!(header(&headers, "mink-up-to-date").as_deref(), Some("true"));

    // Mink batches out: offsets stamped, rows intact.
    let r = h.read("t", "offset=2", MINK_BATCHES).await;
    assert_eq!(r.status(), StatusCode::OK);
    let bytes = r.bytes().await.unwrap();
    let mut offsets = Vec::new();
    let mut ids = Vec::new();
    for batch in batches(bytes) {
        let batch = batch.expect("valid batch");
        batch.validate().expect("CRC and body check");
        offsets.push(batch.base_offset());
        let (rb, _) = batch.decode(&schema()).unwrap();
        let col = rb.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        ids.extend(col.values().iter().copied());
    }
    assert_eq!(offsets, vec![2, 3, 5]);
    assert_eq!(ids, vec![3, 4, 5, 6, 7]);

    // Arrow out, bounded by `until` and `max_bytes`.
    let r = h.read("t", "offset=0&until=2", ARROW).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        header(r.headers(), "mink-next-offset").as_deref(),
        Some("2")
    );
    assert!(header(r.headers(), "mink-up-to-date").is_none());
    let got: Vec<RecordBatch> = arrow_reader(r).await.map(|b| b.unwrap()).collect();
    assert_eq!(got, vec![rows(&[1, 2])]);

    let (small, headers) = h.read_ndjson("t", "offset=0&max_bytes=1").await;
    assert_eq!(ids_of(&small), vec![1, 2], "at least one whole batch");
    assert_eq!(header(&headers, "mink-next-offset").as_deref(), Some("2"));

    // Another bucket is another log.
    let r = h
        .http
        .get(h.v1("tables/t/buckets/1/records?offset=0"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        header(r.headers(), "mink-high-watermark").as_deref(),
        Some("0")
    );
}
