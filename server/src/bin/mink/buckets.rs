//! `mink offsets`, `mink trim` and `mink writer init`: one request each.

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::json;

use crate::client::{BucketRef, CliResult, Client};
use crate::output::{Output, bytes};

#[derive(Debug, Args)]
pub(crate) struct OffsetsArgs {
    /// The bucket: TABLE (bucket 0) or TABLE/BUCKET.
    target: BucketRef,
    /// The partition.
    #[arg(long, default_value = "default")]
    partition: String,
    /// The first offset committed at or after this time (milliseconds since the Unix epoch),
    /// instead of the bucket's offsets.
    #[arg(long)]
    timestamp: Option<i64>,
}

#[derive(Debug, Args)]
pub(crate) struct TrimArgs {
    /// The bucket: TABLE (bucket 0) or TABLE/BUCKET.
    target: BucketRef,
    /// The new log start: everything below it is deleted.
    offset: u64,
    /// The partition.
    #[arg(long, default_value = "default")]
    partition: String,
}

#[derive(Debug, Subcommand)]
pub(crate) enum WriterCommand {
    /// A new idempotent writer id (send it as Mink-Writer-Id, with Mink-Sequence from 0).
    Init,
}

pub(crate) async fn offsets(client: &Client, out: Output, args: OffsetsArgs) -> CliResult<()> {
    let mut url = client.bucket_url(&args.target, "offsets", &args.partition);
    if let Some(ts) = args.timestamp {
        url.push_str(&format!("&timestamp={ts}"));
    }
    let answer = client.get_json(&url).await?;
    out.say(
        || match args.timestamp {
            Some(ts) => format!(
                "{}: offset {} is the first at or after {ts}",
                args.target, answer["offset"]
            ),
            None => format!(
                "{}: log start {}, high watermark {}, {} retained",
                args.target,
                answer["log_start"],
                answer["high_watermark"],
                bytes(answer["retained_bytes"].as_u64().unwrap_or(0))
            ),
        },
        &answer,
    )
}

pub(crate) async fn trim(client: &Client, out: Output, args: TrimArgs) -> CliResult<()> {
    let url = client.bucket_url(&args.target, "trim", &args.partition);
    let answer = client
        .send_json(Method::POST, &url, &json!({ "offset": args.offset }))
        .await?;
    out.say(
        || {
            format!(
                "{}: log start {}, high watermark {}",
                args.target, answer["log_start"], answer["high_watermark"]
            )
        },
        &answer,
    )
}

pub(crate) async fn writer(client: &Client, out: Output, command: WriterCommand) -> CliResult<()> {
    match command {
        WriterCommand::Init => {
            let answer = client
                .send_json(Method::POST, &client.v1("writers"), &json!({}))
                .await?;
            out.say(|| format!("writer id {}", answer["writer_id"]), &answer)
        }
    }
}
