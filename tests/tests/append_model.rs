//! A model-based property test of one bucket over the HTTP API: random sequences of valid appends
//! (NDJSON, Arrow and mink batches, with and without writer ids, retries), invalid appends
//! (truncated batch, bad CRC, header-only batch, forged record count, garbage, wrong schema id,
//! out-of-order sequence), trims and reads, run against an in-process node on memory stores and
//! checked against a model after every step:
//!
//! - every acknowledged row is readable at its offset with its values, in every read format;
//! - a refused append changes nothing (log start and high watermark stay where they were);
//! - a retry of an acknowledged idempotent append is a duplicate with the first offsets.
//!
//! One node serves every case; each case has a table of its own.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::{Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;
use mink_codec::header::{CRC_START, HEADER_LEN, LENGTH_PREFIX, pos};
use mink_codec::{BatchMeta, Encoder};
use mink_metadata::MemoryKv;
use mink_s3stream::storage::ObjectStoreBackend;
use mink_server::{Node, Settings};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Whether the generators include the two invalid appends that only a full validation of the
/// Arrow body refuses: a header without its body, and a forged `record_count`. The tablet decodes
/// every appended batch, so both are refused; turning this off narrows the test to header checks.
const HEADER_ONLY_AND_FORGED_COUNT: bool = true;

/// Cases, and steps per case: enough to reach trims between retries, small enough to run in
/// seconds (each acknowledged append waits for a WAL PUT on the memory store).
const CASES: u32 = 64;
const MAX_STEPS: usize = 24;

const MINK: &str = "application/vnd.mink.batches";
const NDJSON: &str = "application/x-ndjson";
const ARROW: &str = "application/vnd.apache.arrow.stream";

type TestResult<T = ()> = Result<T, TestCaseError>;

/// One row of the table (`id` int64 not null, `msg` utf8).
type Row = (i64, Option<String>);

#[derive(Debug, Clone, Copy)]
enum Format {
    Ndjson,
    Arrow,
    /// Mink batches, one or two in the request.
    Mink {
        batches: usize,
    },
}

#[derive(Debug, Clone)]
enum Bad {
    /// A valid batch cut short at this fraction of its length.
    Truncated(u8),
    /// A valid batch with one byte of the CRC-covered region (or of the CRC) flipped.
    FlippedByte(u16),
    /// A valid header (CRC and all) claiming rows, without the Arrow body.
    HeaderOnly,
    /// A valid one-row batch whose header claims `i32::MAX` rows, CRC recomputed.
    ForgedCount,
    /// Bytes that are no batch.
    GarbageBatch(Vec<u8>),
    /// Bytes that are no NDJSON (they start with a byte no JSON text starts with).
    GarbageNdjson(Vec<u8>),
    /// NDJSON rows of the wrong type.
    WrongRowType,
    /// A batch, or an NDJSON body, naming a schema id the table does not have.
    WrongSchemaId { mink: bool },
    /// A writer's next batch with its sequence ahead of the expected one by this much.
    OutOfOrder { writer: usize, gap: i32 },
}

#[derive(Debug, Clone)]
enum Step {
    Append {
        format: Format,
        rows: Vec<Row>,
        writer: Option<usize>,
    },
    /// Sends again the acknowledged idempotent request picked by this number, if one still is in
    /// its writer's window.
    Retry(usize),
    Invalid(Bad),
    /// Trims to this fraction of the retained range.
    Trim(u8),
    /// Reads from this fraction of the retained range to the high watermark.
    Read(u8),
}

fn rows() -> impl Strategy<Value = Vec<Row>> {
    prop::collection::vec(
        (any::<i64>(), prop::option::of("[a-z\u{e9}\"\\\\ ]{0,6}")),
        1..5,
    )
}

fn bad() -> impl Strategy<Value = Bad> {
    let mut cases = vec![
        any::<u8>().prop_map(Bad::Truncated).boxed(),
        any::<u16>().prop_map(Bad::FlippedByte).boxed(),
        prop::collection::vec(any::<u8>(), 0..80)
            .prop_map(Bad::GarbageBatch)
            .boxed(),
        prop::collection::vec(any::<u8>(), 0..40)
            .prop_map(Bad::GarbageNdjson)
            .boxed(),
        Just(Bad::WrongRowType).boxed(),
        any::<bool>()
            .prop_map(|mink| Bad::WrongSchemaId { mink })
            .boxed(),
        (0..2usize, 1..4i32)
            .prop_map(|(writer, gap)| Bad::OutOfOrder { writer, gap })
            .boxed(),
    ];
    if HEADER_ONLY_AND_FORGED_COUNT {
        cases.push(Just(Bad::HeaderOnly).boxed());
        cases.push(Just(Bad::ForgedCount).boxed());
    }
    prop::strategy::Union::new(cases)
}

fn step() -> impl Strategy<Value = Step> {
    let format = prop_oneof![
        Just(Format::Ndjson),
        Just(Format::Arrow),
        (1..=2usize).prop_map(|batches| Format::Mink { batches }),
    ];
    prop_oneof![
        5 => (format, rows(), prop::option::of(0..2usize))
            .prop_map(|(format, rows, writer)| Step::Append { format, rows, writer }),
        2 => any::<usize>().prop_map(Step::Retry),
        4 => bad().prop_map(Step::Invalid),
        1 => any::<u8>().prop_map(Step::Trim),
        2 => any::<u8>().prop_map(Step::Read),
    ]
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("msg", DataType::Utf8, true),
    ]))
}

fn record_batch(rows: &[Row]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.1.clone()))),
        ],
    )
    .expect("rows match the schema")
}

fn mink_batch(rows: &[Row], meta: BatchMeta) -> Vec<u8> {
    Encoder::new()
        .encode(&record_batch(rows), None, meta)
        .expect("rows encode")
}

fn ndjson(rows: &[Row]) -> Vec<u8> {
    rows.iter()
        .map(|(id, msg)| match msg {
            Some(msg) => json!({"id": id, "msg": msg}).to_string() + "\n",
            None => json!({"id": id}).to_string() + "\n",
        })
        .collect::<String>()
        .into_bytes()
}

fn arrow_ipc(rows: &[Row]) -> Vec<u8> {
    let mut writer = arrow_ipc::writer::StreamWriter::try_new(Vec::new(), &schema()).unwrap();
    writer.write(&record_batch(rows)).unwrap();
    writer.finish().unwrap();
    writer.into_inner().unwrap()
}

fn rows_of(batch: &RecordBatch) -> Vec<Row> {
    let ids = batch
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    let msgs = batch
        .column(1)
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    (0..batch.num_rows())
        .map(|i| {
            (
                ids.value(i),
                msgs.is_valid(i).then(|| msgs.value(i).to_owned()),
            )
        })
        .collect()
}

/// Rewrites a batch's CRC after its covered bytes changed.
fn reseal(batch: &mut [u8]) {
    let crc = crc32c::crc32c(&batch[CRC_START..]);
    batch[pos::CRC..pos::CRC + 4].copy_from_slice(&crc.to_le_bytes());
}

/// An append request as sent, to send again.
#[derive(Debug, Clone)]
struct Request {
    content_type: &'static str,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

/// An acknowledged idempotent request and what it was answered.
#[derive(Debug, Clone)]
struct Acked {
    request: Request,
    writer: usize,
    sequences: Vec<i32>,
    base_offset: u64,
    next_offset: u64,
}

/// What the bucket must hold.
#[derive(Debug, Default)]
struct Model {
    rows: BTreeMap<u64, Row>,
    log_start: u64,
    high_watermark: u64,
    /// Per writer: the sequence it must send next (none before its first batch).
    next_sequence: [Option<i32>; 2],
    /// Per writer: the sequences of its last five batches.
    window: [VecDeque<i32>; 2],
    acked: Vec<Acked>,
}

impl Model {
    fn record(&mut self, writer: usize, sequence: i32) {
        let window = &mut self.window[writer];
        window.push_back(sequence);
        if window.len() > 5 {
            window.pop_front();
        }
        self.next_sequence[writer] = Some(sequence + 1);
    }
}

/// One case: a table of its own on the shared node, the writer ids it uses, and the model.
struct Case<'a> {
    http: &'a reqwest::Client,
    url: String,
    table: String,
    writers: [i64; 2],
    model: Model,
}

impl Case<'_> {
    fn records(&self) -> String {
        format!("{}/v1/tables/{}/buckets/0/records", self.url, self.table)
    }

    async fn send(&self, request: &Request) -> (StatusCode, Value) {
        let mut builder = self
            .http
            .post(self.records())
            .header("content-type", request.content_type)
            .body(request.body.clone());
        for (name, value) in &request.headers {
            builder = builder.header(*name, value);
        }
        let response = builder.send().await.expect("append request");
        let status = response.status();
        let body = response.json().await.unwrap_or(Value::Null);
        (status, body)
    }

    async fn offsets(&self) -> (u64, u64) {
        let o: Value = self
            .http
            .get(format!(
                "{}/v1/tables/{}/buckets/0/offsets",
                self.url, self.table
            ))
            .send()
            .await
            .expect("offsets request")
            .json()
            .await
            .expect("offsets body");
        (
            o["log_start"].as_u64().expect("log_start"),
            o["high_watermark"].as_u64().expect("high_watermark"),
        )
    }

    async fn check_offsets(&self, after: &str) -> TestResult {
        let got = self.offsets().await;
        prop_assert_eq!(
            got,
            (self.model.log_start, self.model.high_watermark),
            "offsets (log_start, high_watermark) after {}",
            after
        );
        Ok(())
    }

    async fn step(&mut self, step: &Step) -> TestResult {
        match step {
            Step::Append {
                format,
                rows,
                writer,
            } => self.append(*format, rows, *writer).await,
            Step::Retry(pick) => self.retry(*pick).await,
            Step::Invalid(bad) => self.invalid(bad).await,
            Step::Trim(at) => self.trim(*at).await,
            Step::Read(at) => {
                let from = self.at(*at);
                self.read_from(from).await
            }
        }
    }

    /// The offset at fraction `at` of the retained range.
    fn at(&self, at: u8) -> u64 {
        let m = &self.model;
        m.log_start + (m.high_watermark - m.log_start) * u64::from(at) / 255
    }

    async fn append(&mut self, format: Format, rows: &[Row], writer: Option<usize>) -> TestResult {
        let first_sequence = writer.map(|w| self.model.next_sequence[w].unwrap_or(0));
        let mut headers = Vec::new();
        let (content_type, body, batches) = match format {
            Format::Ndjson | Format::Arrow => {
                if let (Some(w), Some(s)) = (writer, first_sequence) {
                    headers.push(("mink-writer-id", self.writers[w].to_string()));
                    headers.push(("mink-sequence", s.to_string()));
                }
                let (content_type, body) = match format {
                    Format::Ndjson => (NDJSON, ndjson(rows)),
                    _ => (ARROW, arrow_ipc(rows)),
                };
                (content_type, body, vec![rows.to_vec()])
            }
            Format::Mink { batches } => {
                // Split the rows between the batches (each keeps at least one).
                let cut = if batches == 2 && rows.len() > 1 {
                    rows.len() / 2
                } else {
                    rows.len()
                };
                let parts: Vec<Vec<Row>> = [&rows[..cut], &rows[cut..]]
                    .into_iter()
                    .filter(|p| !p.is_empty())
                    .map(<[Row]>::to_vec)
                    .collect();
                let mut body = Vec::new();
                for (i, part) in parts.iter().enumerate() {
                    let meta = match (writer, first_sequence) {
                        (Some(w), Some(s)) => {
                            BatchMeta::new(1).with_writer(self.writers[w], s + i as i32)
                        }
                        _ => BatchMeta::new(1),
                    };
                    body.extend(mink_batch(part, meta));
                }
                (MINK, body, parts)
            }
        };
        let request = Request {
            content_type,
            headers,
            body,
        };
        let (status, answer) = self.send(&request).await;
        prop_assert_eq!(status, StatusCode::OK, "valid append refused: {}", answer);
        prop_assert_eq!(&answer["duplicate"], &json!(false), "{}", answer);
        let base_offset = answer["base_offset"].as_u64().expect("base_offset");
        let next_offset = answer["next_offset"].as_u64().expect("next_offset");
        prop_assert_eq!(
            base_offset,
            self.model.high_watermark,
            "appended at the end"
        );
        prop_assert_eq!(
            next_offset - base_offset,
            rows.len() as u64,
            "one offset per row"
        );
        for (i, row) in batches.iter().flatten().enumerate() {
            self.model.rows.insert(base_offset + i as u64, row.clone());
        }
        self.model.high_watermark = next_offset;
        if let (Some(w), Some(s)) = (writer, first_sequence) {
            let sequences: Vec<i32> = (0..batches.len() as i32).map(|i| s + i).collect();
            for &sequence in &sequences {
                self.model.record(w, sequence);
            }
            self.model.acked.push(Acked {
                request,
                writer: w,
                sequences,
                base_offset,
                next_offset,
            });
        }
        self.check_offsets("an append").await
    }

    async fn retry(&mut self, pick: usize) -> TestResult {
        // Only requests whose batches are all still in their writer's window are duplicates.
        let live: Vec<&Acked> = self
            .model
            .acked
            .iter()
            .filter(|a| {
                a.sequences
                    .iter()
                    .all(|s| self.model.window[a.writer].contains(s))
            })
            .collect();
        let Some(acked) = live.get(pick % live.len().max(1)).copied().cloned() else {
            return Ok(());
        };
        let (status, answer) = self.send(&acked.request).await;
        prop_assert_eq!(status, StatusCode::OK, "retry refused: {}", answer);
        prop_assert_eq!(&answer["duplicate"], &json!(true), "{}", answer);
        prop_assert_eq!(answer["base_offset"].as_u64(), Some(acked.base_offset));
        prop_assert_eq!(answer["next_offset"].as_u64(), Some(acked.next_offset));
        self.check_offsets("a retry").await
    }

    async fn invalid(&mut self, bad: &Bad) -> TestResult {
        let one: Vec<Row> = vec![(7, Some("seven".to_owned()))];
        let mink = |body: Vec<u8>| Request {
            content_type: MINK,
            headers: Vec::new(),
            body,
        };
        let (request, expected) = match bad {
            Bad::Truncated(at) => {
                let batch = mink_batch(&one, BatchMeta::new(1));
                let cut = (batch.len() - 1) * usize::from(*at) / 255;
                (mink(batch[..cut].to_vec()), Some(StatusCode::BAD_REQUEST))
            }
            Bad::FlippedByte(at) => {
                let mut batch = mink_batch(&one, BatchMeta::new(1));
                let at = pos::CRC + usize::from(*at) % (batch.len() - pos::CRC);
                batch[at] ^= 0x20;
                (mink(batch), Some(StatusCode::BAD_REQUEST))
            }
            Bad::HeaderOnly => {
                let mut batch = mink_batch(&one, BatchMeta::new(1));
                batch.truncate(HEADER_LEN);
                let length = (HEADER_LEN - LENGTH_PREFIX) as i32;
                batch[pos::LENGTH..pos::LENGTH + 4].copy_from_slice(&length.to_le_bytes());
                reseal(&mut batch);
                (mink(batch), Some(StatusCode::BAD_REQUEST))
            }
            Bad::ForgedCount => {
                let mut batch = mink_batch(&one, BatchMeta::new(1));
                batch[pos::RECORD_COUNT..pos::RECORD_COUNT + 4]
                    .copy_from_slice(&i32::MAX.to_le_bytes());
                batch[pos::LAST_OFFSET_DELTA..pos::LAST_OFFSET_DELTA + 4]
                    .copy_from_slice(&(i32::MAX - 1).to_le_bytes());
                reseal(&mut batch);
                (mink(batch), Some(StatusCode::BAD_REQUEST))
            }
            Bad::GarbageBatch(bytes) => (mink(bytes.clone()), Some(StatusCode::BAD_REQUEST)),
            Bad::GarbageNdjson(bytes) => {
                let mut body = vec![0xff];
                body.extend_from_slice(bytes);
                let request = Request {
                    content_type: NDJSON,
                    headers: Vec::new(),
                    body,
                };
                (request, Some(StatusCode::BAD_REQUEST))
            }
            Bad::WrongRowType => {
                let request = Request {
                    content_type: NDJSON,
                    headers: Vec::new(),
                    body: b"{\"id\":\"seven\"}\n".to_vec(),
                };
                (request, Some(StatusCode::BAD_REQUEST))
            }
            Bad::WrongSchemaId { mink: true } => (
                mink(mink_batch(&one, BatchMeta::new(7))),
                Some(StatusCode::BAD_REQUEST),
            ),
            Bad::WrongSchemaId { mink: false } => {
                let request = Request {
                    content_type: NDJSON,
                    headers: vec![("mink-schema-id", "7".to_owned())],
                    body: ndjson(&one),
                };
                (request, Some(StatusCode::BAD_REQUEST))
            }
            Bad::OutOfOrder { writer, gap } => {
                // An unknown writer may start anywhere: only a known one can be out of order.
                let Some(next) = self.model.next_sequence[*writer] else {
                    return Ok(());
                };
                let meta = BatchMeta::new(1).with_writer(self.writers[*writer], next + gap);
                (mink(mink_batch(&one, meta)), Some(StatusCode::CONFLICT))
            }
        };
        let (status, answer) = self.send(&request).await;
        prop_assert!(
            status.is_client_error(),
            "{:?} answered {}: {}",
            bad,
            status,
            answer
        );
        if let Some(expected) = expected {
            prop_assert_eq!(status, expected, "{:?}: {}", bad, answer);
        }
        prop_assert!(answer["error"].is_string(), "a JSON error: {}", answer);
        self.check_offsets(&format!("a refused {bad:?}")).await
    }

    async fn trim(&mut self, at: u8) -> TestResult {
        let to = self.at(at);
        let response = self
            .http
            .post(format!(
                "{}/v1/tables/{}/buckets/0/trim",
                self.url, self.table
            ))
            .json(&json!({"offset": to}))
            .send()
            .await
            .expect("trim request");
        prop_assert_eq!(response.status(), StatusCode::OK);
        self.model.log_start = self.model.log_start.max(to);
        self.check_offsets("a trim").await
    }

    /// Reads `[from, high watermark)` as mink batches, decoding them here, and once as NDJSON,
    /// rendered by the node: both must give the model's rows at their offsets.
    async fn read_from(&self, from: u64) -> TestResult {
        let schema = schema();
        let mut cursor = from;
        let mut seen: BTreeMap<u64, Row> = BTreeMap::new();
        let mut first_chunk: Option<Vec<i64>> = None;
        loop {
            let response = self
                .http
                .get(format!("{}?offset={cursor}", self.records()))
                .header("accept", MINK)
                .send()
                .await
                .expect("read request");
            prop_assert_eq!(response.status(), StatusCode::OK, "read from {}", cursor);
            let next: u64 = response
                .headers()
                .get("mink-next-offset")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .expect("Mink-Next-Offset");
            let body = response.bytes().await.expect("read body");
            let mut chunk_ids = Vec::new();
            for view in mink_codec::batches(Bytes::from(body.to_vec())) {
                let view = view.map_err(|e| TestCaseError::fail(format!("stored batch: {e}")))?;
                let base = u64::try_from(view.base_offset()).expect("assigned offset");
                let (rows, _) = view.decode(&schema).map_err(|e| {
                    TestCaseError::fail(format!("an acknowledged batch does not decode: {e}"))
                })?;
                for (i, row) in rows_of(&rows).into_iter().enumerate() {
                    let offset = base + i as u64;
                    if offset >= from {
                        // NDJSON reads start at the row asked for, even inside a batch.
                        chunk_ids.push(row.0);
                        seen.insert(offset, row);
                    }
                }
            }
            first_chunk.get_or_insert(chunk_ids);
            if next >= self.model.high_watermark || next <= cursor {
                prop_assert!(
                    next >= self.model.high_watermark,
                    "a read stopped at {} below the high watermark",
                    next
                );
                break;
            }
            cursor = next;
        }
        let expected: BTreeMap<u64, Row> = self
            .model
            .rows
            .range(from..self.model.high_watermark)
            .map(|(o, r)| (*o, r.clone()))
            .collect();
        prop_assert_eq!(seen, expected, "rows read from {}", from);

        // The node renders the same rows as NDJSON (a prefix of them, if it bounds the chunk).
        let response = self
            .http
            .get(format!("{}?offset={from}", self.records()))
            .header("accept", NDJSON)
            .send()
            .await
            .expect("NDJSON read request");
        prop_assert_eq!(
            response.status(),
            StatusCode::OK,
            "NDJSON read from {}",
            from
        );
        let text = response.text().await.expect("NDJSON body");
        let ids: Vec<i64> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).expect("an NDJSON row")["id"]
                    .as_i64()
                    .expect("id")
            })
            .collect();
        let first_chunk = first_chunk.unwrap_or_default();
        prop_assert!(
            first_chunk.starts_with(&ids),
            "NDJSON ids {:?} are not a prefix of the batches' {:?}",
            ids,
            first_chunk
        );
        Ok(())
    }

    /// At the end of a case: everything retained reads back, and below the log start is gone.
    async fn finish(&self) -> TestResult {
        self.check_offsets("the last step").await?;
        self.read_from(self.model.log_start).await?;
        if self.model.log_start > 0 {
            let response = self
                .http
                .get(format!(
                    "{}?offset={}",
                    self.records(),
                    self.model.log_start - 1
                ))
                .send()
                .await
                .expect("read below the log start");
            prop_assert_eq!(response.status(), StatusCode::GONE);
        }
        Ok(())
    }
}

async fn start_node() -> Node {
    let settings = Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        flight: mink_server::settings::FlightSettings {
            listen: None,
            ..Default::default()
        },
        kafka: mink_server::settings::KafkaSettings {
            listen: None,
            ..Default::default()
        },
        ..Settings::default()
    };
    Node::builder()
        .settings(settings)
        .object_store(Arc::new(ObjectStoreBackend::memory()))
        .metadata(Arc::new(MemoryKv::new()))
        .start()
        .await
        .expect("node starts on memory stores")
}

async fn run_case(http: &reqwest::Client, url: &str, table: String, steps: &[Step]) -> TestResult {
    let created = http
        .post(format!("{url}/v1/tables"))
        .json(&json!({"name": table, "schema": {"fields": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "msg", "type": "utf8"}]}}))
        .send()
        .await
        .expect("create table");
    prop_assert_eq!(created.status(), StatusCode::CREATED);
    let mut writers = [0i64; 2];
    for writer in &mut writers {
        let answer: Value = http
            .post(format!("{url}/v1/writers"))
            .send()
            .await
            .expect("init writer")
            .json()
            .await
            .expect("writer id");
        *writer = answer["writer_id"].as_i64().expect("writer_id");
    }
    let mut case = Case {
        http,
        url: url.to_owned(),
        table,
        writers,
        model: Model::default(),
    };
    for step in steps {
        case.step(step).await?;
    }
    case.finish().await
}

#[test]
fn appends_trims_and_reads_agree_with_the_model() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let node = runtime.block_on(start_node());
    let url = node.url();
    let http = reqwest::Client::new();
    let tables = AtomicUsize::new(0);
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        max_shrink_iters: 200,
        failure_persistence: None,
        ..Config::default()
    });
    let outcome = runner.run(&prop::collection::vec(step(), 1..MAX_STEPS), |steps| {
        let table = format!("model{}", tables.fetch_add(1, Ordering::Relaxed));
        runtime.block_on(run_case(&http, &url, table, &steps))
    });
    runtime.block_on(async { node.abort() });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
}
