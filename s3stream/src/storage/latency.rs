//! [`LatencyStorage`]: delays every call by a latency drawn from a [`LatencyProfile`], so a
//! local or in-memory store behaves like S3 Standard or S3 Express One Zone on this machine
//! (group commit, read-ahead and caching can then be studied at realistic latencies).
//!
//! Each operation's fixed latency (request to first byte) is log-normal, fitted to a p50 and a
//! p99: `ln(latency) ~ Normal(mu, sigma)` with `mu = ln(p50)` and
//! `sigma = (ln(p99) - ln(p50)) / 2.326` (2.326 is the standard normal's 99th percentile).
//! Transfer time is added as size / bandwidth: before a PUT reaches the inner store, after a GET
//! returns from it. Draws come from a seeded RNG, so a seed gives the same latency sequence for
//! the same sequence of calls.

use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use super::{ObjectMeta, ObjectStorage, PutResult, Result};
use mink_runtime::SeededRng;

/// The standard normal distribution's 99th percentile.
const Z99: f64 = 2.326_347_874_040_841;

/// A log-normal latency distribution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyDistribution {
    /// Mean of `ln(seconds)`.
    mu: f64,
    /// Standard deviation of `ln(seconds)`.
    sigma: f64,
    zero: bool,
}

impl LatencyDistribution {
    /// The log-normal distribution with the given median and 99th percentile (`p99` below `p50`
    /// is treated as `p50`: a constant latency).
    pub fn from_p50_p99(p50: Duration, p99: Duration) -> Self {
        if p50.is_zero() {
            return Self::ZERO;
        }
        let mu = p50.as_secs_f64().ln();
        let sigma = ((p99.max(p50).as_secs_f64().ln() - mu) / Z99).max(0.0);
        LatencyDistribution {
            mu,
            sigma,
            zero: false,
        }
    }

    /// Always `latency`.
    pub fn constant(latency: Duration) -> Self {
        Self::from_p50_p99(latency, latency)
    }

    /// No latency at all.
    pub const ZERO: LatencyDistribution = LatencyDistribution {
        mu: 0.0,
        sigma: 0.0,
        zero: true,
    };

    /// The median.
    pub fn p50(&self) -> Duration {
        self.quantile_z(0.0)
    }

    /// The 99th percentile.
    pub fn p99(&self) -> Duration {
        self.quantile_z(Z99)
    }

    fn quantile_z(&self, z: f64) -> Duration {
        if self.zero {
            return Duration::ZERO;
        }
        Duration::try_from_secs_f64((self.mu + self.sigma * z).exp()).unwrap_or(Duration::MAX)
    }

    /// A draw, given a standard normal variate.
    fn sample(&self, normal: f64) -> Duration {
        self.quantile_z(normal)
    }
}

/// Latencies and bandwidths of an object store, per operation.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct LatencyProfile {
    /// PUT request latency, excluding transfer.
    pub put: LatencyDistribution,
    /// PUT upload bandwidth of one request, bytes per second (0: unlimited).
    pub put_bytes_per_sec: u64,
    /// GET time to first byte.
    pub get_first_byte: LatencyDistribution,
    /// GET download bandwidth of one request, bytes per second (0: unlimited).
    pub get_bytes_per_sec: u64,
    /// HEAD latency.
    pub head: LatencyDistribution,
    /// DELETE (and DeleteObjects) latency.
    pub delete: LatencyDistribution,
    /// LIST latency (the whole listing).
    pub list: LatencyDistribution,
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

impl LatencyProfile {
    /// Approximately S3 Standard from a nearby EC2 instance: PUT p50 30 ms / p99 150 ms, GET
    /// first byte p50 15 ms / p99 80 ms, about 90 MB/s per request.
    pub fn s3_standard() -> Self {
        LatencyProfile {
            put: LatencyDistribution::from_p50_p99(ms(30), ms(150)),
            put_bytes_per_sec: 90_000_000,
            get_first_byte: LatencyDistribution::from_p50_p99(ms(15), ms(80)),
            get_bytes_per_sec: 90_000_000,
            head: LatencyDistribution::from_p50_p99(ms(10), ms(50)),
            delete: LatencyDistribution::from_p50_p99(ms(15), ms(60)),
            list: LatencyDistribution::from_p50_p99(ms(30), ms(150)),
        }
    }

    /// Approximately S3 Express One Zone in the same zone: single-digit milliseconds (PUT p50
    /// 5 ms / p99 10 ms, GET first byte p50 3 ms / p99 8 ms), about 200 MB/s per request.
    pub fn s3_express_one_zone() -> Self {
        LatencyProfile {
            put: LatencyDistribution::from_p50_p99(ms(5), ms(10)),
            put_bytes_per_sec: 200_000_000,
            get_first_byte: LatencyDistribution::from_p50_p99(ms(3), ms(8)),
            get_bytes_per_sec: 200_000_000,
            head: LatencyDistribution::from_p50_p99(ms(2), ms(6)),
            delete: LatencyDistribution::from_p50_p99(ms(3), ms(8)),
            list: LatencyDistribution::from_p50_p99(ms(8), ms(25)),
        }
    }

    /// No added latency and unlimited bandwidth.
    pub fn none() -> Self {
        LatencyProfile {
            put: LatencyDistribution::ZERO,
            put_bytes_per_sec: 0,
            get_first_byte: LatencyDistribution::ZERO,
            get_bytes_per_sec: 0,
            head: LatencyDistribution::ZERO,
            delete: LatencyDistribution::ZERO,
            list: LatencyDistribution::ZERO,
        }
    }

    /// The same profile with another PUT latency.
    pub fn with_put(mut self, put: LatencyDistribution) -> Self {
        self.put = put;
        self
    }

    /// The same profile with another GET first-byte latency.
    pub fn with_get_first_byte(mut self, get: LatencyDistribution) -> Self {
        self.get_first_byte = get;
        self
    }

    /// The same profile with other bandwidths (bytes per second, 0 unlimited).
    pub fn with_bandwidth(mut self, put_bytes_per_sec: u64, get_bytes_per_sec: u64) -> Self {
        self.put_bytes_per_sec = put_bytes_per_sec;
        self.get_bytes_per_sec = get_bytes_per_sec;
        self
    }
}

fn transfer(len: usize, bytes_per_sec: u64) -> Duration {
    if bytes_per_sec == 0 {
        Duration::ZERO
    } else {
        Duration::from_secs_f64(len as f64 / bytes_per_sec as f64)
    }
}

/// Wraps an [`ObjectStorage`] and adds latency from a [`LatencyProfile`] (feature `test-util`).
#[derive(Debug)]
pub struct LatencyStorage {
    inner: Arc<dyn ObjectStorage>,
    profile: LatencyProfile,
    rng: Mutex<SeededRng>,
}

impl LatencyStorage {
    /// Delays calls to `inner` by draws from `profile`, seeded with `seed`.
    pub fn new(inner: Arc<dyn ObjectStorage>, profile: LatencyProfile, seed: u64) -> Self {
        LatencyStorage {
            inner,
            profile,
            rng: Mutex::new(SeededRng::new(seed)),
        }
    }

    /// The profile in use.
    pub fn profile(&self) -> &LatencyProfile {
        &self.profile
    }

    fn draw(&self, dist: &LatencyDistribution) -> Duration {
        let normal = self
            .rng
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .standard_normal();
        dist.sample(normal)
    }

    async fn pause(&self, delay: Duration) {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl ObjectStorage for LatencyStorage {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn put(&self, key: &str, data: Bytes) -> Result<PutResult> {
        let delay =
            self.draw(&self.profile.put) + transfer(data.len(), self.profile.put_bytes_per_sec);
        self.pause(delay).await;
        self.inner.put(key, data).await
    }

    async fn put_parts(&self, key: &str, parts: Vec<Bytes>) -> Result<PutResult> {
        let len = parts.iter().map(Bytes::len).sum();
        let delay = self.draw(&self.profile.put) + transfer(len, self.profile.put_bytes_per_sec);
        self.pause(delay).await;
        self.inner.put_parts(key, parts).await
    }

    async fn put_if_absent(&self, key: &str, data: Bytes) -> Result<PutResult> {
        let delay =
            self.draw(&self.profile.put) + transfer(data.len(), self.profile.put_bytes_per_sec);
        self.pause(delay).await;
        self.inner.put_if_absent(key, data).await
    }

    async fn get(&self, key: &str) -> Result<Bytes> {
        self.pause(self.draw(&self.profile.get_first_byte)).await;
        let bytes = self.inner.get(key).await?;
        self.pause(transfer(bytes.len(), self.profile.get_bytes_per_sec))
            .await;
        Ok(bytes)
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        self.pause(self.draw(&self.profile.get_first_byte)).await;
        let bytes = self.inner.get_range(key, range).await?;
        self.pause(transfer(bytes.len(), self.profile.get_bytes_per_sec))
            .await;
        Ok(bytes)
    }

    async fn get_range_pieces(
        &self,
        key: &str,
        range: Range<u64>,
        piece_len: u64,
    ) -> Result<Vec<Bytes>> {
        self.pause(self.draw(&self.profile.get_first_byte)).await;
        let pieces = self.inner.get_range_pieces(key, range, piece_len).await?;
        let len = pieces.iter().map(Bytes::len).sum();
        self.pause(transfer(len, self.profile.get_bytes_per_sec))
            .await;
        Ok(pieces)
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        self.pause(self.draw(&self.profile.head)).await;
        self.inner.head(key).await
    }

    async fn delete(&self, key: &str) -> Result<()> {
        self.pause(self.draw(&self.profile.delete)).await;
        self.inner.delete(key).await
    }

    async fn delete_many(&self, keys: &[String]) -> Result<()> {
        self.pause(self.draw(&self.profile.delete)).await;
        self.inner.delete_many(keys).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        self.pause(self.draw(&self.profile.list)).await;
        self.inner.list(prefix).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fitted_quantiles() {
        let d = LatencyDistribution::from_p50_p99(ms(30), ms(150));
        let close = |a: Duration, b: Duration| (a.as_secs_f64() - b.as_secs_f64()).abs() < 1e-6;
        assert!(close(d.p50(), ms(30)), "{:?}", d.p50());
        assert!(close(d.p99(), ms(150)), "{:?}", d.p99());
        assert_eq!(LatencyDistribution::ZERO.p99(), Duration::ZERO);
        assert!(close(LatencyDistribution::constant(ms(7)).p99(), ms(7)));

        // Empirical quantiles of seeded draws match the fit.
        let mut rng = SeededRng::new(1);
        let mut draws: Vec<Duration> = (0..20_000)
            .map(|_| d.sample(rng.standard_normal()))
            .collect();
        draws.sort();
        let p50 = draws[draws.len() / 2].as_secs_f64();
        let p99 = draws[draws.len() * 99 / 100].as_secs_f64();
        assert!((p50 - 0.030).abs() < 0.002, "p50 {p50}");
        assert!((p99 - 0.150).abs() < 0.02, "p99 {p99}");
    }
}
