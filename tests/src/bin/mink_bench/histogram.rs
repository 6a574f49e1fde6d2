//! Histograms read from the node's `/metrics` before and after a case: what the case added, and
//! quantiles estimated from it (linear within a bucket, as Prometheus' `histogram_quantile`).

use std::collections::HashMap;

/// What a histogram gained between two scrapes.
#[derive(Debug, Clone, Default)]
pub(crate) struct HistogramDelta {
    /// `(upper bound, cumulative count)`, by increasing bound; the last bound may be infinite.
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
}

/// The delta of histogram `metric` (full name, e.g. `mink_append_duration_seconds`) over its
/// series whose labels include every `(name, value)` of `labels` (all series when empty).
pub(crate) fn delta(
    before: &HashMap<String, f64>,
    after: &HashMap<String, f64>,
    metric: &str,
    labels: &[(&str, &str)],
) -> HistogramDelta {
    let wanted: Vec<String> = labels
        .iter()
        .map(|(name, value)| format!("{name}=\"{value}\""))
        .collect();
    let selected = |key: &str, suffix: &str| -> bool {
        let Some(rest) = key
            .strip_prefix(metric)
            .and_then(|r| r.strip_prefix(suffix))
        else {
            return false;
        };
        let labels = rest
            .strip_prefix('{')
            .and_then(|r| r.strip_suffix('}'))
            .unwrap_or("");
        wanted.iter().all(|w| labels.split(',').any(|l| l == w))
    };
    let diff = |key: &String, value: &f64| value - before.get(key).copied().unwrap_or(0.0);
    let mut buckets: Vec<(f64, f64)> = after
        .iter()
        .filter(|(key, _)| selected(key, "_bucket"))
        .filter_map(|(key, value)| {
            let le = key.split("le=\"").nth(1)?.split('"').next()?;
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((bound, diff(key, value)))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = |suffix: &str| -> f64 {
        after
            .iter()
            .filter(|(key, _)| selected(key, suffix))
            .map(|(key, value)| diff(key, value))
            .sum()
    };
    HistogramDelta {
        buckets,
        sum: total("_sum"),
        count: total("_count"),
    }
}

impl HistogramDelta {
    /// Observations in the delta.
    pub(crate) fn count(&self) -> f64 {
        self.count
    }

    /// Mean, in milliseconds (0 without observations).
    pub(crate) fn mean_ms(&self) -> f64 {
        if self.count > 0.0 {
            self.sum / self.count * 1e3
        } else {
            0.0
        }
    }

    /// The `q` quantile, in milliseconds, interpolated linearly inside its bucket (the last
    /// finite bound when it falls in the infinite one; 0 without observations).
    pub(crate) fn quantile_ms(&self, q: f64) -> f64 {
        if self.count <= 0.0 {
            return 0.0;
        }
        let rank = q * self.count;
        let mut lower = (0.0, 0.0);
        for &(bound, cumulative) in &self.buckets {
            if cumulative >= rank {
                if bound.is_infinite() {
                    return lower.0 * 1e3;
                }
                let inside = cumulative - lower.1;
                let fraction = if inside > 0.0 {
                    (rank - lower.1) / inside
                } else {
                    1.0
                };
                return (lower.0 + (bound - lower.0) * fraction) * 1e3;
            }
            lower = (bound, cumulative);
        }
        lower.0 * 1e3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(lines: &[(&str, f64)]) -> HashMap<String, f64> {
        lines.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    #[test]
    fn quantiles_of_what_a_case_added() {
        let before = scrape(&[
            ("m_seconds_bucket{stage=\"put\",le=\"0.001\"}", 10.0),
            ("m_seconds_bucket{stage=\"put\",le=\"0.002\"}", 10.0),
            ("m_seconds_bucket{stage=\"put\",le=\"+Inf\"}", 10.0),
            ("m_seconds_sum{stage=\"put\"}", 0.005),
            ("m_seconds_count{stage=\"put\"}", 10.0),
        ]);
        // The case added 100 observations: 50 at or below 1 ms, 40 in (1, 2] ms, 10 above.
        let after = scrape(&[
            ("m_seconds_bucket{stage=\"put\",le=\"0.001\"}", 60.0),
            ("m_seconds_bucket{stage=\"put\",le=\"0.002\"}", 100.0),
            ("m_seconds_bucket{stage=\"put\",le=\"+Inf\"}", 110.0),
            ("m_seconds_sum{stage=\"put\"}", 0.305),
            ("m_seconds_count{stage=\"put\"}", 110.0),
            ("m_seconds_bucket{stage=\"wake\",le=\"0.001\"}", 7.0),
        ]);
        let put = delta(&before, &after, "m_seconds", &[("stage", "put")]);
        assert_eq!(put.count(), 100.0);
        assert!((put.mean_ms() - 3.0).abs() < 1e-9);
        assert!((put.quantile_ms(0.5) - 1.0).abs() < 1e-9);
        assert!((put.quantile_ms(0.7) - 1.5).abs() < 1e-9);
        assert!((put.quantile_ms(0.99) - 2.0).abs() < 1e-9);
        let none = delta(&before, &after, "m_seconds", &[("stage", "admission")]);
        assert_eq!(none.count(), 0.0);
        assert_eq!(none.quantile_ms(0.99), 0.0);
    }
}
