//! The HTTP client of the run: tables, appends acknowledged durable, `/metrics` and offsets.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::Error;

#[derive(Clone)]
pub(crate) struct Client {
    pub(crate) http: reqwest::Client,
    pub(crate) url: String,
}

impl Client {
    pub(crate) async fn create_table(
        &self,
        name: &str,
        fields: serde_json::Value,
        buckets: u32,
    ) -> Result<(), Error> {
        let r = self
            .http
            .post(format!("{}/v1/tables", self.url))
            .json(&serde_json::json!({"name": name, "buckets": buckets, "schema": {"fields": fields}}))
            .send()
            .await;
        succeeded(r, &format!("create table {name}")).await
    }

    /// Drops a table: the node destroys its logs and collects their objects in the background.
    pub(crate) async fn drop_table(&self, name: &str) -> Result<(), Error> {
        let r = self
            .http
            .delete(format!("{}/v1/tables/{name}", self.url))
            .send()
            .await;
        succeeded(r, &format!("drop table {name}")).await
    }

    pub(crate) fn records(&self, table: &str, bucket: u32) -> String {
        format!("{}/v1/tables/{table}/buckets/{bucket}/records", self.url)
    }

    /// Appends and waits for the acknowledgement (durable).
    pub(crate) async fn append(
        &self,
        table: &str,
        bucket: u32,
        content_type: &str,
        body: Bytes,
    ) -> Result<(), Error> {
        self.post(self.records(table, bucket), content_type, body)
            .await
            .map_err(|e| format!("append to {table}/{bucket}: {e}"))
    }

    /// POSTs `body` to `url` and waits for a successful answer.
    pub(crate) async fn post(
        &self,
        url: String,
        content_type: &str,
        body: Bytes,
    ) -> Result<(), Error> {
        let r = self
            .http
            .post(&url)
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .map_err(|e| format!("POST {url}: {}", chain(&e)))?;
        let status = r.status();
        let text = r.bytes().await.map_err(|e| format!("POST answer: {e}"))?;
        if !status.is_success() {
            return Err(format!(
                "POST {url}: {status} {}",
                String::from_utf8_lossy(&text)
            ));
        }
        Ok(())
    }

    /// A long-poll read of `url` started now: the instant its 200 answer was read.
    pub(crate) fn long_poll(&self, url: String) -> tokio::task::JoinHandle<Result<Instant, Error>> {
        let http = self.http.clone();
        tokio::spawn(async move {
            let r = http
                .get(url)
                .send()
                .await
                .map_err(|e| format!("long-poll: {e}"))?;
            let status = r.status();
            r.bytes()
                .await
                .map_err(|e| format!("long-poll body: {e}"))?;
            if status != reqwest::StatusCode::OK {
                return Err(format!("long-poll answered {status}"));
            }
            Ok(Instant::now())
        })
    }

    pub(crate) async fn metrics(&self) -> Result<HashMap<String, f64>, Error> {
        let text = self
            .http
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .map_err(|e| format!("/metrics: {e}"))?
            .text()
            .await
            .map_err(|e| format!("/metrics: {e}"))?;
        Ok(text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (name, value) = l.rsplit_once(' ')?;
                Some((name.to_owned(), value.parse().ok()?))
            })
            .collect())
    }

    /// A counter or gauge by name, without the `mink_` prefix and counters' `_total` suffix.
    pub(crate) async fn metric(&self, name: &str) -> Result<f64, Error> {
        let m = self.metrics().await?;
        m.get(&format!("mink_{name}_total"))
            .or_else(|| m.get(&format!("mink_{name}")))
            .copied()
            .ok_or(format!("/metrics has no {name}"))
    }

    /// Waits until the gauge `name` (as [`Client::metric`] names it) is at least `value`.
    pub(crate) async fn wait_metric(&self, name: &str, value: f64) -> Result<(), Error> {
        let started = Instant::now();
        loop {
            let now = self.metric(name).await?;
            if now >= value {
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(20) {
                return Err(format!("{name} is {now}, not {value}, after 20 s"));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub(crate) async fn high_watermark(&self, table: &str, bucket: u32) -> Result<u64, Error> {
        let v: serde_json::Value = self
            .http
            .get(format!(
                "{}/v1/tables/{table}/buckets/{bucket}/offsets",
                self.url
            ))
            .send()
            .await
            .map_err(|e| format!("offsets: {e}"))?
            .json()
            .await
            .map_err(|e| format!("offsets: {e}"))?;
        v["high_watermark"]
            .as_u64()
            .ok_or(format!("offsets answer without high_watermark: {v}"))
    }

    /// Reads offsets `0..end` of a bucket as `accept`, 8 MiB of stored batches a request:
    /// the bytes of the answers and the seconds it took.
    pub(crate) async fn read_range(
        &self,
        table: &str,
        bucket: u32,
        end: u64,
        accept: &str,
    ) -> Result<(u64, f64), Error> {
        let url = self.records(table, bucket);
        let started = Instant::now();
        let (mut offset, mut bytes) = (0u64, 0u64);
        while offset < end {
            let r = self
                .http
                .get(format!("{url}?offset={offset}&max_bytes={}", 8 << 20))
                .header("accept", accept)
                .send()
                .await
                .map_err(|e| format!("read {table}: {e}"))?;
            if !r.status().is_success() {
                return Err(format!("read {table} at {offset}: {}", r.status()));
            }
            let next = header_u64(&r, "mink-next-offset").ok_or("no mink-next-offset")?;
            bytes += body_len(r).await?;
            if next <= offset {
                return Err(format!("read of {table} made no progress at {offset}"));
            }
            offset = next;
        }
        Ok((bytes, started.elapsed().as_secs_f64()))
    }
}

/// Reads a response's body to its end as it arrives and counts its bytes, without joining them
/// into one buffer (the driver's own copy would be counted against the node).
/// Reads an SSE response into `buffer` until it holds one of `wants` (20 s at most).
pub(crate) async fn read_until(
    response: &mut reqwest::Response,
    buffer: &mut String,
    wants: &[String],
) -> Result<(), Error> {
    while !wants.iter().any(|w| buffer.contains(w.as_str())) {
        let chunk = tokio::time::timeout(Duration::from_secs(20), response.chunk())
            .await
            .map_err(|_| "no SSE event within 20 s of an append".to_owned())?
            .map_err(|e| format!("SSE: {e}"))?
            .ok_or("an SSE stream ended")?;
        buffer.push_str(&String::from_utf8_lossy(&chunk));
    }
    Ok(())
}

pub(crate) async fn body_len(mut r: reqwest::Response) -> Result<u64, Error> {
    let mut len = 0u64;
    while let Some(chunk) = r.chunk().await.map_err(|e| format!("read body: {e}"))? {
        len += chunk.len() as u64;
    }
    Ok(len)
}

pub(crate) fn header_u64(r: &reqwest::Response, name: &str) -> Option<u64> {
    r.headers().get(name)?.to_str().ok()?.parse().ok()
}

/// `e` with its causes (`reqwest`'s own text leaves out why a request failed: a refused
/// connection, one closed before the response, a timeout).
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// A request's outcome as the bench needs it: an error naming `what` unless it was answered
/// with a success status (the answer's body in the error).
async fn succeeded(r: reqwest::Result<reqwest::Response>, what: &str) -> Result<(), Error> {
    let r = r.map_err(|e| format!("{what}: {e}"))?;
    if !r.status().is_success() {
        return Err(format!(
            "{what}: {} {}",
            r.status(),
            r.text().await.unwrap_or_default()
        ));
    }
    Ok(())
}
