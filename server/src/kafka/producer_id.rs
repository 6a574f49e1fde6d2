//! InitProducerId: idempotent producers take their ids from the writer-id allocator
//! (docs/kafka.md, "Idempotent producers").

use kafka_protocol::messages::InitProducerIdResponse;

use super::errors::{code, code_of};
use super::requests::InitProducerIdRequest;
use super::state::Kafka;

/// Answers an InitProducerId.
pub(crate) async fn init_producer_id(
    kafka: &Kafka,
    request: InitProducerIdRequest,
) -> InitProducerIdResponse {
    let refused = |error_code| {
        InitProducerIdResponse::default()
            .with_error_code(error_code)
            .with_producer_id((-1).into())
            .with_producer_epoch(-1)
    };
    if request
        .transactional_id
        .as_deref()
        .is_some_and(|t| !t.is_empty())
    {
        // Transactions are not served: the code clients report as "not supported".
        return refused(code::UNSUPPORTED_VERSION);
    }
    if let Err(e) = kafka.principal().check(crate::auth::Action::Write, None) {
        return refused(code_of(&e));
    }
    let core = kafka.core();
    // An existing producer bumping its epoch (KIP-360) keeps its id.
    if request.producer_id >= 0 && request.producer_epoch >= 0 {
        let known = match core.metadata().writer_id_high_mark().await {
            Ok(mark) => u64::try_from(request.producer_id).is_ok_and(|id| id < mark),
            Err(e) => return refused(code_of(&e.into())),
        };
        if !known {
            return refused(code::UNKNOWN_PRODUCER_ID);
        }
        if request.producer_epoch < mink_codec::MAX_WRITER_EPOCH {
            return InitProducerIdResponse::default()
                .with_producer_id(request.producer_id.into())
                .with_producer_epoch(request.producer_epoch + 1);
        }
    }
    match core.allocate_writer_id().await {
        Ok(id) => InitProducerIdResponse::default()
            .with_producer_id(i64::try_from(id).unwrap_or(i64::MAX).into())
            .with_producer_epoch(0),
        Err(e) => refused(code_of(&e)),
    }
}
