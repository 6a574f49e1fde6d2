//! The HTTP client of the run: tables, appends acknowledged durable, `/metrics` and offsets.

use std::collections::HashMap;

use bytes::Bytes;

use crate::Error;

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
            .await
            .map_err(|e| format!("create table {name}: {e}"))?;
        if !r.status().is_success() {
            return Err(format!(
                "create table {name}: {} {}",
                r.status(),
                r.text().await.unwrap_or_default()
            ));
        }
        Ok(())
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
        let r = self
            .http
            .post(self.records(table, bucket))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .map_err(|e| format!("append to {table}/{bucket}: {e}"))?;
        let status = r.status();
        let text = r.bytes().await.map_err(|e| format!("append answer: {e}"))?;
        if !status.is_success() {
            return Err(format!(
                "append to {table}/{bucket}: {status} {}",
                String::from_utf8_lossy(&text)
            ));
        }
        Ok(())
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
}

/// Reads a response's body to its end as it arrives and counts its bytes, without joining them
/// into one buffer (the driver's own copy would be counted against the node).
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
