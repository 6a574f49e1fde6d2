//! GetFlightInfo, ListFlights and GetSchema: one FlightInfo per table (or per bucket, for a
//! descriptor naming one), with one endpoint per bucket whose location is the Flight URL of the
//! node serving it and whose ticket reads it. GetFlightInfo opens the buckets this node serves
//! to put their offsets in the tickets (`offset` the log start, `until` the high watermark: a
//! snapshot of the table); ListFlights, which answers for every table, leaves them out (a
//! ticket without offsets reads from the log start to the high watermark of its DoGet).

use std::sync::Arc;

use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, SchemaAsIpc, SchemaResult};
use arrow_ipc::writer::IpcWriteOptions;
use futures::StreamExt;
use tonic::Status;

use super::address::{BucketAddress, Named, Ticket, parse_descriptor};
use super::state::Flight;
use super::status::status;
use crate::auth::{Action, Principal};
use crate::catalog::TableInfo;
use crate::error::ApiError;

/// Buckets opened at once to learn their offsets.
const OPEN_AT_ONCE: usize = 16;

impl Flight {
    /// GetFlightInfo.
    pub(crate) async fn flight_info(
        self: &Arc<Self>,
        principal: &Principal,
        descriptor: FlightDescriptor,
    ) -> Result<FlightInfo, Status> {
        let named = parse_descriptor(&descriptor)?;
        principal.check(Action::Read, Some(named.table()))?;
        let info = self.core.catalog().get(named.table()).await?;
        let addresses = match &named {
            Named::Bucket(address) => {
                self.core
                    .log_key(&info, address.bucket, &address.partition)?;
                vec![address.clone()]
            }
            Named::Table(_) => buckets_of(&info),
        };
        self.info_of(&info, descriptor, addresses, true).await
    }

    /// ListFlights: the tables this principal may read.
    pub(crate) async fn list(&self, principal: &Principal) -> Result<Vec<FlightInfo>, Status> {
        principal.check(Action::Read, None)?;
        let mut infos = Vec::new();
        for record in self.core.catalog().list().await? {
            if !principal.may_read(&record.name) {
                continue;
            }
            let info = match self.core.catalog().get(&record.name).await {
                Ok(info) => info,
                // Dropped since it was listed.
                Err(ApiError::TableNotFound { .. }) => continue,
                Err(e) => return Err(status(&e)),
            };
            let descriptor = FlightDescriptor::new_path(vec![record.name.clone()]);
            infos.push(
                self.info_of(&info, descriptor, buckets_of(&info), false)
                    .await?,
            );
        }
        Ok(infos)
    }

    /// GetSchema: the table's newest schema.
    pub(crate) async fn schema(
        &self,
        principal: &Principal,
        descriptor: FlightDescriptor,
    ) -> Result<SchemaResult, Status> {
        let named = parse_descriptor(&descriptor)?;
        principal.check(Action::Read, Some(named.table()))?;
        let info = self.core.catalog().get(named.table()).await?;
        let (_, schema) = info
            .schemas
            .latest()
            .ok_or_else(|| Status::internal("the table has no schema"))?;
        let options = IpcWriteOptions::default();
        SchemaResult::try_from(SchemaAsIpc::new(&schema, &options))
            .map_err(|e| Status::internal(e.to_string()))
    }

    async fn info_of(
        &self,
        info: &Arc<TableInfo>,
        descriptor: FlightDescriptor,
        addresses: Vec<BucketAddress>,
        with_offsets: bool,
    ) -> Result<FlightInfo, Status> {
        let (_, schema) = info
            .schemas
            .latest()
            .ok_or_else(|| Status::internal("the table has no schema"))?;
        let endpoints: Vec<(FlightEndpoint, Option<u64>)> =
            futures::stream::iter(addresses.into_iter().map(|address| {
                let info = info.clone();
                async move { self.endpoint(&info, &address, with_offsets).await }
            }))
            .buffered(OPEN_AT_ONCE)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<_, Status>>()?;
        let total = endpoints
            .iter()
            .map(|(_, rows)| *rows)
            .sum::<Option<u64>>()
            .and_then(|rows| i64::try_from(rows).ok())
            .unwrap_or(-1);
        FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(e.to_string()))
            .map(|flight_info| {
                flight_info
                    .with_descriptor(descriptor)
                    .with_endpoints(endpoints.into_iter().map(|(e, _)| e).collect())
                    .with_ordered(false)
                    .with_total_records(total)
            })
    }

    /// One bucket's endpoint, and its rows when its offsets are known.
    async fn endpoint(
        &self,
        info: &Arc<TableInfo>,
        address: &BucketAddress,
        with_offsets: bool,
    ) -> Result<(FlightEndpoint, Option<u64>), Status> {
        let key = self
            .core
            .log_key(info, address.bucket, &address.partition)?;
        let mut ticket = Ticket::new(address, None, None);
        let mut rows = None;
        if with_offsets && self.is_local(&key) {
            let log = self.open(info, address).await?;
            let offsets = log.offsets();
            ticket.offset = Some(offsets.log_start);
            ticket.until = Some(offsets.high_watermark);
            rows = Some(offsets.high_watermark - offsets.log_start);
        }
        let mut endpoint =
            FlightEndpoint::new().with_ticket(arrow_flight::Ticket::new(ticket.to_bytes()));
        if let Some(url) = self.location(&key) {
            endpoint = endpoint.with_location(url);
        }
        Ok((endpoint, rows))
    }
}

/// Every bucket of every partition of the table.
fn buckets_of(info: &TableInfo) -> Vec<BucketAddress> {
    let record = info.record();
    record
        .partitions
        .iter()
        .flat_map(|partition| {
            (0..record.bucket_count).map(|bucket| BucketAddress {
                table: record.name.clone(),
                partition: partition.clone(),
                bucket,
            })
        })
        .collect()
}
