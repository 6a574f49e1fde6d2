//! The parked-read limits: how many long-polls may park and SSE streams stay open at once, on the
//! node (`http.max_parked_reads`) and for one client IP address
//! (`http.max_parked_reads_per_client`). A long-poll takes a place when it would park and gives
//! it back when it returns; an SSE stream holds one for its whole life (until its body is
//! dropped, when it ends or the client goes). Past either limit the request is refused with 429
//! `too_many_requests`, so idle readers cannot hold every task and socket of the node. The
//! parked readers also share what they render for small batches (`shared_renders.rs`).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use parking_lot::Mutex;

use super::shared_renders::{SharedBodies, SharedEvents};
use crate::error::{ApiError, ApiResult};
use crate::metrics::Metrics;

/// The places of parked reads, shared by every request of one router.
#[derive(Debug)]
pub(crate) struct ParkedReads {
    max: usize,
    max_per_client: usize,
    held: Mutex<Held>,
    metrics: Arc<Metrics>,
    /// The events of small batches, rendered once for every SSE stream that sends them.
    pub(crate) events: Arc<SharedEvents>,
    /// The bodies of long-polls answered by small batches, rendered once for every long-poll
    /// that sends the same.
    pub(crate) bodies: Arc<SharedBodies>,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_client: HashMap<IpAddr, usize>,
}

/// One place taken; dropping it gives it back.
#[derive(Debug)]
pub(crate) struct ParkedRead {
    reads: Arc<ParkedReads>,
    client: IpAddr,
}

impl ParkedReads {
    pub(crate) fn new(max: usize, max_per_client: usize, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(ParkedReads {
            max,
            max_per_client,
            held: Mutex::new(Held::default()),
            metrics,
            events: Arc::default(),
            bodies: Arc::default(),
        })
    }

    /// Takes a place for `client` (`None`: a connection without a peer address, all of which
    /// count as one client), or refuses past either limit.
    pub(crate) fn admit(self: &Arc<Self>, client: Option<IpAddr>) -> ApiResult<ParkedRead> {
        let client = client.map_or(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            super::listener::client_of,
        );
        let mut held = self.held.lock();
        let refusal = if held.total >= self.max {
            Some(format!(
                "the node holds {} parked long-polls and SSE streams (setting `http.max_parked_reads`); retry later",
                self.max
            ))
        } else if held.by_client.get(&client).copied().unwrap_or(0) >= self.max_per_client {
            Some(format!(
                "this client holds {} parked long-polls and SSE streams (setting `http.max_parked_reads_per_client`); retry later",
                self.max_per_client
            ))
        } else {
            None
        };
        if let Some(message) = refusal {
            drop(held);
            self.metrics.parked_reads_refused.inc();
            return Err(ApiError::TooManyRequests { message });
        }
        held.total += 1;
        *held.by_client.entry(client).or_default() += 1;
        self.metrics.parked_reads.inc();
        Ok(ParkedRead {
            reads: Arc::clone(self),
            client,
        })
    }
}

impl Drop for ParkedRead {
    fn drop(&mut self) {
        let mut held = self.reads.held.lock();
        held.total = held.total.saturating_sub(1);
        if let Some(n) = held.by_client.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.by_client.remove(&self.client);
            }
        }
        self.reads.metrics.parked_reads.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_bounded_per_node_and_per_client_and_given_back() {
        let metrics = Arc::new(Metrics::new(None));
        let reads = ParkedReads::new(3, 2, metrics.clone());
        let a = Some(IpAddr::from([10, 0, 0, 1]));
        let b = Some(IpAddr::from([10, 0, 0, 2]));
        let a1 = reads.admit(a).unwrap();
        let _a2 = reads.admit(a).unwrap();
        let refused = reads.admit(a).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("http.max_parked_reads_per_client"),
            "{refused}"
        );
        let _b1 = reads.admit(b).unwrap();
        let refused = reads.admit(b).unwrap_err();
        assert_eq!(refused.kind(), "too_many_requests");
        assert!(
            refused.to_string().contains("`http.max_parked_reads`"),
            "{refused}"
        );
        assert_eq!(metrics.parked_reads.get(), 3);
        drop(a1);
        assert_eq!(metrics.parked_reads.get(), 2);
        let _b2 = reads.admit(b).unwrap();
        assert_eq!(metrics.parked_reads_refused.get(), 2);
    }
}
