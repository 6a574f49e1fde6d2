//! Tables whose appends are stored compressed (docs/compression.md): the setting at create and
//! with PATCH; NDJSON, Arrow IPC and mink-batch appends stored compressed and read back the same
//! as NDJSON, Arrow IPC, SSE and projected; fewer bytes stored for a log-like column; an Arrow
//! body the client compressed accepted on a table without the setting; a decompression bomb
//! refused with nothing appended.

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_ipc::writer::{IpcWriteOptions, StreamWriter};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use mink_codec::{BatchMeta, BatchView, Compression, Encoder, batches};
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::data::{arrow_reader, schema};
use super::harness::{ARROW, Backend, Harness, MINK_BATCHES, expect_error};

/// Rows `first..first + n` with a log-like `msg`: a few templates, varying numbers.
fn log_rows(first: i64, n: i64) -> RecordBatch {
    let ids: Vec<i64> = (first..first + n).collect();
    let msgs: Vec<String> = ids
        .iter()
        .map(|i| {
            format!(
                "2026-03-01T12:{:02}:{:02}Z INFO http: GET /v1/tables/orders/buckets/{}/records status=200 rows={} took={}us",
                i / 60 % 60,
                i % 60,
                i % 8,
                i * 7 % 1000,
                i * 13 % 5000
            )
        })
        .collect();
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(StringArray::from(msgs)),
        ],
    )
    .expect("rows")
}

fn ndjson_of(rows: &RecordBatch) -> String {
    let ids = rows
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .expect("ids");
    let msgs = rows
        .column(1)
        .as_any()
        .downcast_ref::<StringArray>()
        .expect("msgs");
    ids.iter()
        .zip(msgs.iter())
        .map(|(id, msg)| format!("{}\n", json!({"id": id, "msg": msg})))
        .collect()
}

fn arrow_stream(rows: &RecordBatch, codec: Option<arrow_ipc::CompressionType>) -> Vec<u8> {
    let options = IpcWriteOptions::default()
        .try_with_compression(codec)
        .expect("options");
    let mut writer =
        StreamWriter::try_new_with_options(Vec::new(), &schema(), options).expect("writer");
    writer.write(rows).expect("write");
    writer.finish().expect("finish");
    writer.into_inner().expect("bytes")
}

/// PATCHes table `table`'s settings with `body`.
async fn patch(h: &Harness, table: &str, body: Value) -> reqwest::Response {
    h.http
        .patch(h.v1(&format!("tables/{table}")))
        .json(&body)
        .send()
        .await
        .expect("request")
}

async fn create(h: &Harness, name: &str, compression: Option<&str>) -> Value {
    let mut body = json!({
        "name": name,
        "schema": {"fields": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "msg", "type": "utf8"}
        ]},
    });
    if let Some(c) = compression {
        body["compression"] = json!(c);
    }
    let response = h.post_json(h.v1("tables"), &body).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json().await.expect("json")
}

/// The stored batches of bucket 0 from offset 0, as mink batches: (codec of each, total bytes).
async fn stored(h: &Harness, table: &str, query: &str) -> (Vec<Option<Compression>>, usize) {
    let response = h
        .read(table, &format!("offset=0{query}"), MINK_BATCHES)
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = response.bytes().await.expect("body");
    let codecs = batches(bytes.clone())
        .map(|b| b.expect("a stored batch").compression().expect("its codec"))
        .collect();
    (codecs, bytes.len())
}

/// Every row of bucket 0 as NDJSON, read in as many requests as the render bound takes.
async fn all_rows(h: &Harness, table: &str, query: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut offset = 0u64;
    loop {
        let (rows, headers) = h
            .read_ndjson(table, &format!("offset={offset}{query}"))
            .await;
        out.extend(rows);
        offset = super::harness::header(&headers, "mink-next-offset")
            .expect("next offset")
            .parse()
            .expect("a number");
        if super::harness::header(&headers, "mink-up-to-date").as_deref() == Some("true") {
            return out;
        }
    }
}

/// The rows of every SSE event from offset 0 until the event whose id is `until`.
async fn sse_rows(h: &Harness, table: &str, until: u64) -> Vec<Value> {
    let response = h
        .http
        .get(format!("{}?offset=0", h.records(table)))
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), StatusCode::OK);
    let mut events = response.bytes_stream().eventsource();
    let mut rows = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("an event")
            .expect("the stream is open")
            .expect("a well-formed event");
        let data: Vec<Value> = serde_json::from_str(&event.data).expect("rows as JSON");
        rows.extend(data);
        if event.id.parse::<u64>().expect("id is an offset") >= until {
            return rows;
        }
    }
}

pub async fn compressed_tables(backend: Backend) {
    let h = Harness::start(backend).await;
    let z = create(&h, "z", Some("zstd")).await;
    assert_eq!(z["compression"], "zstd", "{z}");
    let plain = create(&h, "plain", None).await;
    assert_eq!(plain["compression"], "none", "{plain}");

    // The same rows to both: NDJSON, an uncompressed Arrow stream, a mink batch with a writer.
    let writer = h.writer_id().await;
    let mink = Encoder::new()
        .encode(
            &log_rows(600, 200),
            None,
            BatchMeta::new(1).with_writer(writer as i64, 0),
        )
        .expect("encode");
    for table in ["z", "plain"] {
        h.append_ndjson(table, &ndjson_of(&log_rows(0, 400))).await;
        h.append_ok(table, ARROW, arrow_stream(&log_rows(400, 200), None))
            .await;
        h.append_ok(table, MINK_BATCHES, mink.clone()).await;
    }
    let (codecs, z_bytes) = stored(&h, "z", "").await;
    assert_eq!(codecs, vec![Some(Compression::ZSTD); 3]);
    let (codecs, plain_bytes) = stored(&h, "plain", "").await;
    assert_eq!(codecs, vec![None; 3]);
    assert!(
        z_bytes * 3 < plain_bytes,
        "{z_bytes} bytes stored with zstd, {plain_bytes} without"
    );
    // The mink batch kept its writer: a retry is a duplicate.
    let retry = h.append_ok("z", MINK_BATCHES, mink.clone()).await;
    assert_eq!(retry["duplicate"], true, "{retry}");

    // Every reader gets the same rows from both.
    let expected = all_rows(&h, "plain", "").await;
    assert_eq!(expected.len(), 800);
    assert_eq!(all_rows(&h, "z", "").await, expected);
    let projected = all_rows(&h, "z", "&columns=msg").await;
    assert_eq!(projected, all_rows(&h, "plain", "&columns=msg").await);
    assert_eq!(projected[5], json!({"msg": expected[5]["msg"]}));
    let (codecs, _) = stored(&h, "z", "&columns=msg").await;
    assert_eq!(
        codecs,
        vec![Some(Compression::ZSTD); 3],
        "projection copies compressed buffers"
    );
    let arrow_rows = |r| async move {
        arrow_reader(r)
            .await
            .map(|b| b.expect("a batch"))
            .collect::<Vec<_>>()
    };
    let from_z = arrow_rows(h.read("z", "offset=0", ARROW).await).await;
    let from_plain = arrow_rows(h.read("plain", "offset=0", ARROW).await).await;
    assert_eq!(from_z, from_plain);
    assert_eq!(from_z.iter().map(RecordBatch::num_rows).sum::<usize>(), 800);
    assert_eq!(sse_rows(&h, "z", 800).await, expected);

    // An Arrow body the client compressed: accepted on a table without the setting.
    for codec in [
        arrow_ipc::CompressionType::LZ4_FRAME,
        arrow_ipc::CompressionType::ZSTD,
    ] {
        let body = arrow_stream(&log_rows(800, 100), Some(codec));
        let ack = h.append_ok("plain", ARROW, body).await;
        assert_eq!(
            ack["last_offset"].as_u64().unwrap() + 1,
            ack["next_offset"].as_u64().unwrap()
        );
    }
    let rows = all_rows(&h, "plain", "").await;
    assert_eq!(rows.len(), 1000);
    assert_eq!(rows[950]["id"], 850);

    // PATCH changes the setting for the appends after it; the retention is left alone.
    let patched: Value = patch(&h, "plain", json!({"compression": "lz4"}))
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(patched["compression"], "lz4", "{patched}");
    assert_eq!(patched["retention"]["policy"], Value::Null, "{patched}");
    h.append_ndjson("plain", &ndjson_of(&log_rows(1000, 50)))
        .await;
    let (codecs, _) = stored(&h, "plain", "").await;
    assert_eq!(codecs.last(), Some(&Some(Compression::Lz4Frame)));
    assert_eq!(codecs.iter().filter(|c| c.is_none()).count(), 5);
    for (body, kind) in [
        (json!({"compression": "brotli"}), "bad_request"),
        (json!({"compression": "zstd:23"}), "bad_request"),
        (json!({}), "bad_request"),
    ] {
        let error = expect_error(
            patch(&h, "plain", body).await,
            StatusCode::BAD_REQUEST,
            kind,
        )
        .await;
        assert!(
            error["message"].as_str().unwrap().contains("compression"),
            "{error}"
        );
    }
    let level: Value = patch(&h, "plain", json!({"compression": "zstd:9"}))
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(level["compression"], "zstd:9", "{level}");
    assert_eq!(
        h.get_json(h.v1("tables/plain")).await["compression"],
        "zstd:9"
    );

    // A batch whose compressed buffer claims a terabyte: refused, nothing appended.
    let before = h.offsets("z", "").await["high_watermark"].clone();
    let mut bomb = Encoder::new()
        .with_compression(Some(Compression::Lz4Frame))
        .expect("encoder")
        .encode(&log_rows(0, 10), None, BatchMeta::new(1))
        .expect("encode");
    let view = BatchView::new(&bomb[..]).expect("a batch");
    let (_, body) = view.message_parts().expect("parts").expect("a message");
    // The first buffer is the `id` column's validity bitmap, left out; the values come first.
    bomb[body.start..body.start + 8].copy_from_slice(&(1i64 << 40).to_le_bytes());
    let crc = crc32c::crc32c(&bomb[mink_codec::header::CRC_START..]);
    let at = mink_codec::header::pos::CRC;
    bomb[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    let error = expect_error(
        h.append("z", MINK_BATCHES, bomb).await,
        StatusCode::BAD_REQUEST,
        "invalid_batch",
    )
    .await;
    assert!(
        error["message"].as_str().unwrap().contains("decompressed"),
        "{error}"
    );
    assert_eq!(h.offsets("z", "").await["high_watermark"], before);
    // An NDJSON read of the compressed table still works after the refusal.
    assert_eq!(all_rows(&h, "z", "").await.len(), 800);
}
