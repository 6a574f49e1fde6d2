//! The Arrow Flight front end over the node core (docs/flight.md): gRPC with `arrow-flight`'s
//! service definitions, served by the HTTP listener (HTTP/2, `[http]`'s connection limits and
//! timeouts, `[http.tls]`'s certificate) on its own address (`flight.listen`).
//!
//! | RPC | What |
//! |---|---|
//! | Handshake | checks the token (bearer, or basic with the token as password) and answers it as `authorization: Bearer` |
//! | DoAction | `init_writer`, `offsets`, `trim` (`actions`) |
//! | DoPut | record batches into one bucket, one PutResult per batch (`put`) |
//! | DoGet | a bucket's rows from a JSON ticket, projected, optionally live (`get`) |
//! | GetFlightInfo, ListFlights, GetSchema | a table's endpoints, one per bucket at its node (`info`) |
//! | PollFlightInfo | GetFlightInfo, complete at once |
//! | DoExchange | UNIMPLEMENTED |
//!
//! Every call takes the HTTP API's tokens (`access`). Files: `address` (descriptors and
//! tickets), `route` (which node serves a bucket), `status` (errors as gRPC statuses), `state`
//! (what every call shares).

mod access;
mod actions;
mod address;
mod get;
mod info;
mod put;
mod route;
mod state;
mod status;

use std::net::SocketAddr;
use std::sync::Arc;

use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest,
    HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status, Streaming};

use self::state::{Flight, Stream};
use crate::core::NodeCore;
use crate::http::{ConnectionGauges, HttpServer};

/// A running Flight front end.
pub(crate) struct FlightServer {
    /// The server; it ends with the core's shutdown.
    pub(crate) server: HttpServer,
    /// The URL this node advertises for Flight.
    pub(crate) url: String,
}

/// Binds `addr` and serves Flight until the core shuts down.
pub(crate) async fn start(core: Arc<NodeCore>, addr: SocketAddr) -> std::io::Result<FlightServer> {
    let settings = core.settings();
    let gauges = ConnectionGauges {
        open: core.metrics().flight_connections.clone(),
        refused: core.metrics().flight_connections_refused.clone(),
    };
    // The listener is bound first: the URL names the port it got.
    let listener = crate::http::bind(addr)?;
    let bound = listener.local_addr()?;
    let scheme = if settings.http.tls.enabled() {
        "grpc+tls"
    } else {
        "grpc"
    };
    let url = settings
        .cluster
        .advertise_flight
        .clone()
        .unwrap_or_else(|| format!("{scheme}://{bound}"));
    let flight = Arc::new(Flight::new(core.clone(), url.clone()));
    let limit = settings.flight.max_message_bytes;
    let service = FlightServiceServer::new(Service(flight))
        .max_decoding_message_size(limit)
        .max_encoding_message_size(limit);
    let app = tonic::service::Routes::new(service).into_axum_router();
    let server = crate::http::serve_listener(core.clone(), listener, app, gauges)?;
    Ok(FlightServer { server, url })
}

/// The tonic service over [`Flight`].
struct Service(Arc<Flight>);

fn once<T: Send + 'static>(item: T) -> Stream<T> {
    Box::pin(futures::stream::once(async move { Ok(item) }))
}

#[tonic::async_trait]
impl FlightService for Service {
    type HandshakeStream = Stream<HandshakeResponse>;
    type ListFlightsStream = Stream<FlightInfo>;
    type DoGetStream = Stream<FlightData>;
    type DoPutStream = Stream<PutResult>;
    type DoActionStream = Stream<arrow_flight::Result>;
    type ListActionsStream = Stream<ActionType>;
    type DoExchangeStream = Stream<FlightData>;

    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        self.0.principal(request.metadata())?;
        let token = access::token(request.metadata());
        let mut response = Response::new(once(HandshakeResponse {
            protocol_version: 0,
            payload: Default::default(),
        }));
        if let Some(value) = token.and_then(|t| MetadataValue::try_from(format!("Bearer {t}")).ok())
        {
            response.metadata_mut().insert(access::AUTHORIZATION, value);
        }
        Ok(response)
    }

    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        let principal = self.0.principal(request.metadata())?;
        let infos = self.0.list(&principal).await?;
        Ok(Response::new(Box::pin(futures::stream::iter(
            infos.into_iter().map(Ok),
        ))))
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let principal = self.0.principal(request.metadata())?;
        let info = self.0.flight_info(&principal, request.into_inner()).await?;
        Ok(Response::new(info))
    }

    async fn poll_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        let principal = self.0.principal(request.metadata())?;
        let info = self.0.flight_info(&principal, request.into_inner()).await?;
        Ok(Response::new(PollInfo::new().with_info(info)))
    }

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        let principal = self.0.principal(request.metadata())?;
        let schema = self.0.schema(&principal, request.into_inner()).await?;
        Ok(Response::new(schema))
    }

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        let principal = self.0.principal(request.metadata())?;
        let ticket = address::Ticket::parse(&request.get_ref().ticket)?;
        let stream = get::do_get(self.0.clone(), principal, ticket).await?;
        Ok(Response::new(stream))
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        let principal = self.0.principal(request.metadata())?;
        let stream = put::do_put(self.0.clone(), principal, request.into_inner()).await?;
        Ok(Response::new(stream))
    }

    async fn do_exchange(
        &self,
        _request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        Err(Status::unimplemented(
            "DoExchange is not served: append with DoPut and read with DoGet",
        ))
    }

    async fn do_action(
        &self,
        request: Request<arrow_flight::Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        let principal = self.0.principal(request.metadata())?;
        let body = self.0.action(&principal, request.into_inner()).await?;
        Ok(Response::new(once(arrow_flight::Result::new(body))))
    }

    async fn list_actions(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        self.0.principal(request.metadata())?;
        Ok(Response::new(Box::pin(futures::stream::iter(
            actions::list().into_iter().map(Ok),
        ))))
    }
}
