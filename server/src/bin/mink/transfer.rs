//! `mink transfer`: asks any node of the cluster to move a bucket to another node.

use clap::Args;

#[derive(Debug, Args)]
pub(crate) struct TransferArgs {
    /// The HTTP URL of any node of the cluster (http:// only, for now).
    #[arg(long, env = "MINK_URL", default_value = "http://127.0.0.1:6465")]
    url: String,
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
    /// A write token, when the cluster requires one.
    #[arg(long, env = "MINK_AUTH_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

/// `text` percent-encoded for a URL path segment or query value (RFC 3986 unreserved kept).
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `mink transfer`: prints the node's answer; fails with its error.
pub(crate) async fn transfer(args: TransferArgs) -> Result<String, String> {
    let url = format!(
        "{}/v1/tables/{}/buckets/{}/transfer?partition={}",
        args.url.trim_end_matches('/'),
        escape(&args.table),
        args.bucket,
        escape(&args.partition)
    );
    let mut request = reqwest::Client::new()
        .post(&url)
        .json(&serde_json::json!({ "to": args.to }));
    if let Some(token) = &args.token {
        request = request.bearer_auth(token);
    }
    let response = request
        .send()
        .await
        .map_err(|e| format!("cannot reach {url}: {e}"))?;
    let status = response.status();
    let body = response
        .text()
        .await
        .map_err(|e| format!("reading the answer of {url}: {e}"))?;
    if status.is_success() {
        Ok(body)
    } else {
        Err(format!("{status}: {body}"))
    }
}
