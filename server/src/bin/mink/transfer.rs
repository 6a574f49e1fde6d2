//! `mink transfer`: asks any node of the cluster to move a bucket to another node.

use clap::Args;
use reqwest::Method;
use serde_json::json;

use crate::client::{BucketRef, CliResult, Client};
use crate::output::Output;

#[derive(Debug, Args)]
pub(crate) struct TransferArgs {
    /// The table.
    #[arg(long)]
    table: String,
    /// The bucket.
    #[arg(long)]
    bucket: u32,
    /// The partition.
    #[arg(long, default_value = "default")]
    partition: String,
    /// The node id to move the bucket to (see GET /v1/cluster).
    #[arg(long)]
    to: String,
}

/// `mink transfer`: prints the node's answer; fails with its error.
pub(crate) async fn transfer(client: &Client, out: Output, args: TransferArgs) -> CliResult<()> {
    let bucket = BucketRef {
        table: args.table,
        bucket: args.bucket,
    };
    let url = client.bucket_url(&bucket, "transfer", &args.partition);
    let answer = client
        .send_json(Method::POST, &url, &json!({ "to": args.to }))
        .await?;
    out.say(
        || format!("{bucket}: moving to {} ({answer})", args.to),
        &answer,
    )
}
