//! `mink read TABLE/BUCKET` (a range, to the high watermark at the start or to `--until`) and
//! `mink tail TABLE/BUCKET` (server-sent events, following the log until interrupted, and
//! reconnecting from the last offset seen when the node recycles the stream or goes away).

use std::io::Cursor;
use std::time::Duration;

use arrow_ipc::writer::StreamWriter;
use clap::{Args, ValueEnum};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::client::{BucketRef, CliResult, Client, error_of, unreachable};
use crate::output::{Output, progress, write_bytes, write_line};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OutputFormat {
    /// One JSON object per row.
    Ndjson,
    /// One Arrow IPC stream.
    Arrow,
}

#[derive(Debug, Args)]
pub(crate) struct ReadArgs {
    /// The bucket: TABLE (bucket 0) or TABLE/BUCKET.
    target: BucketRef,
    /// The partition.
    #[arg(long, default_value = "default")]
    partition: String,
    /// The first offset [default: the log start].
    #[arg(long)]
    from: Option<u64>,
    /// Stop before this offset [default: the high watermark when the read starts].
    #[arg(long)]
    until: Option<u64>,
    /// Only these columns, comma-separated.
    #[arg(long, value_delimiter = ',')]
    columns: Option<Vec<String>>,
    /// The output's format.
    #[arg(long, value_enum, default_value = "ndjson")]
    format: OutputFormat,
}

#[derive(Debug, Args)]
pub(crate) struct TailArgs {
    /// The bucket: TABLE (bucket 0) or TABLE/BUCKET.
    target: BucketRef,
    /// The partition.
    #[arg(long, default_value = "default")]
    partition: String,
    /// The first offset [default: the high watermark: only rows appended from now on].
    #[arg(long)]
    from: Option<u64>,
    /// Only these columns, comma-separated.
    #[arg(long, value_delimiter = ',')]
    columns: Option<Vec<String>>,
}

fn header_u64(response: &reqwest::Response, name: &str) -> Option<u64> {
    response.headers().get(name)?.to_str().ok()?.parse().ok()
}

pub(crate) async fn read(client: &Client, out: Output, args: ReadArgs) -> CliResult<()> {
    if args.format == OutputFormat::Arrow && out.human {
        return Err(
            "Arrow IPC is binary: redirect it to a file or a pipe (> rows.arrows)".to_owned(),
        );
    }
    let offsets = client
        .get_json(&client.bucket_url(&args.target, "offsets", &args.partition))
        .await?;
    let log_start = offsets["log_start"].as_u64().unwrap_or(0);
    let high_watermark = offsets["high_watermark"].as_u64().unwrap_or(0);
    let mut next = args.from.unwrap_or(log_start);
    let end = args.until.unwrap_or(high_watermark);
    let bar = progress(end.saturating_sub(next), "reading offsets", false);
    let base = client.bucket_url(&args.target, "records", &args.partition);
    let accept = match args.format {
        OutputFormat::Ndjson => "application/x-ndjson",
        OutputFormat::Arrow => "application/vnd.apache.arrow.stream",
    };
    let columns = args.columns.map(|c| format!("&columns={}", c.join(",")));
    let mut arrow: Option<StreamWriter<Vec<u8>>> = None;
    while next < end {
        let url = format!(
            "{base}&offset={next}&until={end}{}",
            columns.as_deref().unwrap_or("")
        );
        let response = client
            .send(client.request(Method::GET, &url).header("accept", accept))
            .await?;
        let moved_to = header_u64(&response, "mink-next-offset").unwrap_or(next);
        let body = response
            .bytes()
            .await
            .map_err(|e| format!("reading rows at offset {next}: {e}"))?;
        match args.format {
            OutputFormat::Ndjson => write_bytes(&body)?,
            OutputFormat::Arrow => write_arrow(&mut arrow, &body)?,
        }
        if moved_to <= next {
            // Nothing more below the bound (the high watermark moved back is impossible; a
            // log trimmed under the read answers 410 instead).
            break;
        }
        bar.inc(moved_to - next);
        next = moved_to;
    }
    bar.finish_and_clear();
    if let Some(writer) = arrow.take() {
        let bytes = writer
            .into_inner()
            .map_err(|e| format!("encoding Arrow IPC: {e}"))?;
        write_bytes(&bytes)?;
    }
    Ok(())
}

/// Adds one response's Arrow IPC stream to the output stream (one schema for the whole read),
/// writing what is encoded so far.
fn write_arrow(writer: &mut Option<StreamWriter<Vec<u8>>>, body: &[u8]) -> CliResult<()> {
    if body.is_empty() {
        return Ok(());
    }
    let reader = arrow_ipc::reader::StreamReader::try_new(Cursor::new(body), None)
        .map_err(|e| format!("the node's Arrow answer: {e}"))?;
    for batch in reader {
        let batch = batch.map_err(|e| format!("the node's Arrow answer: {e}"))?;
        if writer.is_none() {
            *writer = Some(
                StreamWriter::try_new(Vec::new(), &batch.schema())
                    .map_err(|e| format!("encoding Arrow IPC: {e}"))?,
            );
        }
        if let Some(w) = writer.as_mut() {
            w.write(&batch).map_err(|e| {
                format!("the rows changed schema version within the read (read each version apart with --from/--until): {e}")
            })?;
            let encoded = std::mem::take(w.get_mut());
            write_bytes(&encoded)?;
        }
    }
    Ok(())
}

pub(crate) async fn tail(client: &Client, args: TailArgs) -> CliResult<()> {
    let base = client.bucket_url(&args.target, "records", &args.partition);
    let columns = args.columns.map(|c| format!("&columns={}", c.join(",")));
    let mut next = match args.from {
        Some(from) => from.to_string(),
        None => "now".to_owned(),
    };
    let mut failures = 0u32;
    loop {
        let url = format!(
            "{base}&live=sse&offset={next}{}",
            columns.as_deref().unwrap_or("")
        );
        let answer = client
            .request(Method::GET, &url)
            .header("accept", "text/event-stream")
            .send()
            .await;
        let response = match answer {
            Ok(r) if r.status().is_success() => r,
            Ok(r) if retryable(r.status()) => {
                let said = error_of(r).await;
                backoff(&mut failures, &said).await?;
                continue;
            }
            Ok(r) => return Err(error_of(r).await),
            Err(e) => {
                backoff(&mut failures, &unreachable(client.base(), &e)).await?;
                continue;
            }
        };
        let mut events = response.bytes_stream().eventsource();
        while let Some(event) = events.next().await {
            let Ok(event) = event else {
                // The connection broke: reconnect from the last offset seen.
                break;
            };
            if event.event == "error" {
                let body: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
                let kind = body["error"].as_str().unwrap_or("error");
                let message = body["message"].as_str().unwrap_or(&event.data);
                if kind == "unavailable" || kind == "shutting_down" {
                    break;
                }
                return Err(format!("{kind}: {message}"));
            }
            failures = 0;
            let rows: Vec<Value> = serde_json::from_str(&event.data)
                .map_err(|e| format!("an event that is not a JSON array of rows: {e}"))?;
            for row in rows {
                write_line(&row.to_string())?;
            }
            if !event.id.is_empty() {
                next = event.id;
            }
        }
        // The node recycles streams (and may have stopped): go on from the last event.
    }
}

fn retryable(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS | StatusCode::BAD_GATEWAY
    )
}

/// Waits before reconnecting; gives up after a minute of failures in a row.
async fn backoff(failures: &mut u32, why: &str) -> CliResult<()> {
    *failures += 1;
    if *failures > 30 {
        return Err(format!("gave up reconnecting: {why}"));
    }
    if *failures == 1 || (*failures).is_power_of_two() {
        #[expect(clippy::print_stderr, reason = "the user sees why the tail waits")]
        {
            eprintln!("mink: {why}; reconnecting");
        }
    }
    tokio::time::sleep(Duration::from_millis(200 * u64::from((*failures).min(10)))).await;
    Ok(())
}
