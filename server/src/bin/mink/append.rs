//! `mink append TABLE[/BUCKET]`: rows from stdin or a file, NDJSON or Arrow IPC (file or stream
//! format, told by its first bytes), sent in requests of about `--request-bytes` each.
//!
//! The command takes a writer id first and numbers its requests, so a request retried after a
//! lost answer (a dropped connection, a 503) is deduplicated by the node: a file is appended
//! exactly once even when the network is not kind.

use std::io::{BufRead, BufReader, Cursor, Read};
use std::path::PathBuf;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_ipc::writer::StreamWriter;
use bytes::Bytes;
use clap::{Args, ValueEnum};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::client::{BucketRef, CliResult, Client, json_of, unreachable};
use crate::output::{Output, progress};

const NDJSON: &str = "application/x-ndjson";
const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum InputFormat {
    /// One JSON object per line.
    Ndjson,
    /// Arrow IPC, file or stream format.
    Arrow,
}

#[derive(Debug, Args)]
pub(crate) struct AppendArgs {
    /// The bucket: TABLE (bucket 0) or TABLE/BUCKET.
    target: BucketRef,
    /// The partition.
    #[arg(long, default_value = "default")]
    partition: String,
    /// The rows: a file of NDJSON or Arrow IPC [default: stdin].
    #[arg(long, short)]
    file: Option<PathBuf>,
    /// The input's format [default: Arrow when it starts like Arrow IPC, else NDJSON].
    #[arg(long, value_enum)]
    format: Option<InputFormat>,
    /// About how many bytes each request carries (below the node's body limits, 8 MiB).
    #[arg(long, default_value_t = 4 << 20)]
    request_bytes: usize,
}

/// What the requests did, summed.
#[derive(Debug, Default)]
struct Summary {
    rows: u64,
    requests: u64,
    duplicates: u64,
    base_offset: Option<u64>,
    next_offset: Option<u64>,
}

/// The node's idempotent writer for one `mink append`: a writer id and the next sequence.
struct Sender<'a> {
    client: &'a Client,
    url: String,
    writer_id: u64,
    sequence: i32,
    summary: Summary,
}

impl Sender<'_> {
    /// Sends one request's body, retrying (the same sequence) while the node is unavailable or
    /// unreachable.
    async fn send(&mut self, body: Bytes, content_type: &str) -> CliResult<()> {
        let mut wait = Duration::from_millis(200);
        let mut attempt = 0;
        let answer = loop {
            attempt += 1;
            let request = self
                .client
                .request(Method::POST, &self.url)
                .header("content-type", content_type)
                .header("mink-writer-id", self.writer_id.to_string())
                .header("mink-sequence", self.sequence.to_string())
                .body(body.clone());
            let retry = match request.send().await {
                Ok(r) if r.status().is_success() => break json_of(r).await?,
                Ok(r)
                    if matches!(
                        r.status(),
                        StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
                    ) =>
                {
                    crate::client::error_of(r).await
                }
                Ok(r) => return Err(crate::client::error_of(r).await),
                Err(e) => unreachable(self.client.base(), &e),
            };
            if attempt >= 6 {
                return Err(format!("gave up after {attempt} attempts: {retry}"));
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(5));
        };
        self.sequence = self.sequence.wrapping_add(1);
        self.count(&answer);
        Ok(())
    }

    fn count(&mut self, answer: &Value) {
        let s = &mut self.summary;
        s.requests += 1;
        if answer["duplicate"].as_bool() == Some(true) {
            s.duplicates += 1;
        }
        let (Some(base), Some(next)) = (
            answer["base_offset"].as_u64(),
            answer["next_offset"].as_u64(),
        ) else {
            return;
        };
        s.rows += next.saturating_sub(base);
        s.base_offset.get_or_insert(base);
        s.next_offset = Some(next);
    }
}

pub(crate) async fn run(client: &Client, out: Output, args: AppendArgs) -> CliResult<()> {
    let (mut input, len): (Box<dyn Read>, Option<u64>) = match &args.file {
        Some(path) if path.as_os_str() != "-" => {
            let file = std::fs::File::open(path)
                .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            let len = file.metadata().ok().map(|m| m.len());
            (Box::new(file), len)
        }
        _ => (Box::new(std::io::stdin().lock()), None),
    };
    // The first bytes tell Arrow IPC (`ARROW1` opens a file, 0xFFFFFFFF a stream message).
    let mut head = [0u8; 6];
    let mut got = 0;
    while got < head.len() {
        match input.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(format!("reading the rows: {e}")),
        }
    }
    let head = head[..got].to_vec();
    let format = args.format.unwrap_or(
        if head.starts_with(b"ARROW1") || head.starts_with(&[0xff, 0xff, 0xff, 0xff]) {
            InputFormat::Arrow
        } else {
            InputFormat::Ndjson
        },
    );
    let input = Cursor::new(head).chain(input);
    let writer: Value = client
        .send_json(Method::POST, &client.v1("writers"), &json!({}))
        .await?;
    let mut sender = Sender {
        client,
        url: client.bucket_url(&args.target, "records", &args.partition),
        writer_id: writer["writer_id"]
            .as_u64()
            .ok_or("the node gave no writer id")?,
        sequence: 0,
        summary: Summary::default(),
    };
    // Only a file's length is known in advance.
    let bar = match len {
        Some(len) => progress(len, "appending", true),
        None => indicatif::ProgressBar::hidden(),
    };
    let chunk = args.request_bytes.max(1);
    match format {
        InputFormat::Ndjson => {
            let mut reader = BufReader::with_capacity(1 << 20, input);
            let mut body = Vec::with_capacity(chunk + (64 << 10));
            loop {
                let read = reader
                    .read_until(b'\n', &mut body)
                    .map_err(|e| format!("reading the rows: {e}"))?;
                let full = body.len() >= chunk;
                if (read == 0 || full) && body.iter().any(|b| !b.is_ascii_whitespace()) {
                    bar.inc(body.len() as u64);
                    sender
                        .send(Bytes::from(std::mem::take(&mut body)), NDJSON)
                        .await?;
                } else if read == 0 || full {
                    body.clear();
                }
                if read == 0 {
                    break;
                }
            }
        }
        InputFormat::Arrow => {
            for (body, consumed) in arrow_requests(input, chunk)? {
                bar.inc(consumed);
                sender.send(body, ARROW_STREAM).await?;
            }
        }
    }
    bar.finish_and_clear();
    let s = &sender.summary;
    let machine = json!({
        "table": args.target.table,
        "partition": args.partition,
        "bucket": args.target.bucket,
        "rows": s.rows,
        "requests": s.requests,
        "duplicates": s.duplicates,
        "base_offset": s.base_offset,
        "next_offset": s.next_offset,
        "writer_id": sender.writer_id,
    });
    out.say(
        || match (s.base_offset, s.next_offset) {
            (Some(base), Some(next)) => format!(
                "appended {} rows to {} at offsets {base}..{next} in {} request(s)",
                s.rows, args.target, s.requests
            ),
            _ => "nothing to append: the input holds no rows".to_owned(),
        },
        &machine,
    )
}

/// Arrow IPC input re-encoded as stream-format request bodies of about `chunk` bytes each (a
/// file-format input is read whole first: its footer is at the end). Each comes with the input
/// bytes it stands for, for the progress bar.
fn arrow_requests(mut input: impl Read, chunk: usize) -> CliResult<Vec<(Bytes, u64)>> {
    let mut all = Vec::new();
    input
        .read_to_end(&mut all)
        .map_err(|e| format!("reading the Arrow input: {e}"))?;
    let total = all.len() as u64;
    let batches: Vec<RecordBatch> = if all.starts_with(b"ARROW1") {
        arrow_ipc::reader::FileReader::try_new(Cursor::new(all), None)
            .map_err(|e| format!("not an Arrow IPC file: {e}"))?
            .collect::<Result<_, _>>()
            .map_err(|e| format!("reading the Arrow IPC file: {e}"))?
    } else {
        arrow_ipc::reader::StreamReader::try_new(Cursor::new(all), None)
            .map_err(|e| format!("not an Arrow IPC stream: {e}"))?
            .collect::<Result<_, _>>()
            .map_err(|e| format!("reading the Arrow IPC stream: {e}"))?
    };
    let mut out = Vec::new();
    let mut group: Vec<RecordBatch> = Vec::new();
    let mut group_bytes = 0;
    for batch in batches {
        group_bytes += batch.get_array_memory_size();
        group.push(batch);
        if group_bytes >= chunk {
            out.push(encode(&group)?);
            group.clear();
            group_bytes = 0;
        }
    }
    if !group.is_empty() {
        out.push(encode(&group)?);
    }
    // Progress in input bytes, shared out by each request's part of the batches.
    let requests = out.len().max(1) as u64;
    Ok(out
        .into_iter()
        .map(|body| (body, total / requests))
        .collect())
}

fn encode(batches: &[RecordBatch]) -> CliResult<Bytes> {
    let Some(first) = batches.first() else {
        return Ok(Bytes::new());
    };
    let mut writer = StreamWriter::try_new(Vec::new(), &first.schema())
        .map_err(|e| format!("encoding Arrow IPC: {e}"))?;
    for batch in batches {
        writer.write(batch).map_err(|e| {
            format!("encoding Arrow IPC (the input's batches must share one schema): {e}")
        })?;
    }
    writer
        .into_inner()
        .map(Bytes::from)
        .map_err(|e| format!("encoding Arrow IPC: {e}"))
}
