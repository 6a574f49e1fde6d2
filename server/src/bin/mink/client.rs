//! The client side of the CLI: which node to talk to and with which token, the HTTP calls every
//! command makes, and how a node's error answer becomes the command's error (its status, kind
//! and message, and a non-zero exit).

use std::time::Duration;

use clap::Args;
use reqwest::{RequestBuilder, Response, StatusCode};
use serde_json::Value;

/// A command's failure: said on stderr, exit status 1.
pub(crate) type CliResult<T> = Result<T, String>;

/// The node and the credentials, shared by every client command.
#[derive(Debug, Clone, Args)]
pub(crate) struct Connection {
    /// The node's HTTP URL (any node of a cluster: requests for buckets it does not own are
    /// redirected to their owner).
    #[arg(
        long,
        env = "MINK_URL",
        default_value = "http://127.0.0.1:6465",
        global = true
    )]
    pub(crate) url: String,
    /// A bearer token, when the node requires one.
    #[arg(long, env = "MINK_AUTH_TOKEN", hide_env_values = true, global = true)]
    pub(crate) token: Option<String>,
}

/// A bucket named on the command line: `TABLE` (bucket 0) or `TABLE/BUCKET`, in a partition.
#[derive(Debug, Clone)]
pub(crate) struct BucketRef {
    pub(crate) table: String,
    pub(crate) bucket: u32,
}

impl std::str::FromStr for BucketRef {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (table, bucket) = match text.rsplit_once('/') {
            Some((table, bucket)) => (
                table,
                bucket
                    .parse()
                    .map_err(|_| format!("`{bucket}` is not a bucket number (TABLE/BUCKET)"))?,
            ),
            None => (text, 0),
        };
        if table.is_empty() {
            return Err("a table name is needed (TABLE or TABLE/BUCKET)".to_owned());
        }
        Ok(BucketRef {
            table: table.to_owned(),
            bucket,
        })
    }
}

impl std::fmt::Display for BucketRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.table, self.bucket)
    }
}

/// `text` percent-encoded for a URL path segment or query value (RFC 3986 unreserved kept).
pub(crate) fn escape(text: &str) -> String {
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

/// A node's HTTP API.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    pub(crate) fn new(connection: &Connection) -> CliResult<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Client {
            base: connection.url.trim_end_matches('/').to_owned(),
            token: connection.token.clone().filter(|t| !t.is_empty()),
            http,
        })
    }

    /// The node's base URL.
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// `{url}/v1/{path}`.
    pub(crate) fn v1(&self, path: &str) -> String {
        format!("{}/v1/{path}", self.base)
    }

    /// The URL of a bucket route (`records`, `offsets`, `trim`) in `partition`.
    pub(crate) fn bucket_url(&self, bucket: &BucketRef, route: &str, partition: &str) -> String {
        format!(
            "{}/v1/tables/{}/buckets/{}/{route}?partition={}",
            self.base,
            escape(&bucket.table),
            bucket.bucket,
            escape(partition)
        )
    }

    /// A request with the token.
    pub(crate) fn request(&self, method: reqwest::Method, url: &str) -> RequestBuilder {
        let request = self.http.request(method, url);
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Sends `request`; a 4xx or 5xx becomes the error, with the node's kind and message.
    pub(crate) async fn send(&self, request: RequestBuilder) -> CliResult<Response> {
        let response = request
            .send()
            .await
            .map_err(|e| unreachable(&self.base, &e))?;
        if response.status().is_client_error() || response.status().is_server_error() {
            return Err(error_of(response).await);
        }
        Ok(response)
    }

    /// GET `url` and its JSON body.
    pub(crate) async fn get_json(&self, url: &str) -> CliResult<Value> {
        json_of(self.send(self.request(reqwest::Method::GET, url)).await?).await
    }

    /// POST (or `method`) a JSON body to `url`; the answer's JSON body.
    pub(crate) async fn send_json(
        &self,
        method: reqwest::Method,
        url: &str,
        body: &Value,
    ) -> CliResult<Value> {
        json_of(self.send(self.request(method, url).json(body)).await?).await
    }
}

/// The error for a node that could not be reached.
pub(crate) fn unreachable(base: &str, e: &reqwest::Error) -> String {
    if e.is_connect() {
        format!("cannot connect to {base} (is a node running there? --url or MINK_URL names it)")
    } else if e.is_timeout() {
        format!("{base} did not answer in time")
    } else {
        format!("the request to {base} failed: {e}")
    }
}

/// A JSON body.
pub(crate) async fn json_of(response: Response) -> CliResult<Value> {
    let url = response.url().clone();
    response
        .json()
        .await
        .map_err(|e| format!("{url} answered something that is not JSON: {e}"))
}

/// `404 table_not_found: table `x` does not exist`, from an error answer.
pub(crate) async fn error_of(response: Response) -> String {
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    match serde_json::from_str::<Value>(&text) {
        Ok(body) if body.get("error").is_some() => {
            let kind = body["error"].as_str().unwrap_or("error");
            let message = body["message"].as_str().unwrap_or("");
            let mut said = format!("{} {kind}: {message}", status.as_u16());
            if status == StatusCode::UNAUTHORIZED {
                said.push_str(" (give a token with --token or MINK_AUTH_TOKEN)");
            }
            said
        }
        _ => format!("{status}: {}", text.trim()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_parse_with_their_table() {
        let b: BucketRef = "events/3".parse().unwrap();
        assert_eq!((b.table.as_str(), b.bucket), ("events", 3));
        let b: BucketRef = "events".parse().unwrap();
        assert_eq!(b.bucket, 0);
        assert!("events/x".parse::<BucketRef>().is_err());
        assert!("/2".parse::<BucketRef>().is_err());
        assert_eq!(escape("a b/c"), "a%20b%2Fc");
    }
}
