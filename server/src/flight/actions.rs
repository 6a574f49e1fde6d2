//! DoAction and ListActions: `init_writer` (`{"writer_id"}` from the allocator every front end
//! shares), `offsets` (`{"table", "partition", "bucket"}` -> `{"log_start", "high_watermark"}`)
//! and `trim` (`{"table", "partition", "bucket", "offset"}` -> the offsets after it).

use std::sync::Arc;

use arrow_flight::ActionType;
use serde::Deserialize;
use serde_json::json;
use tonic::Status;

use super::address::{BucketAddress, DEFAULT_PARTITION};
use super::state::Flight;
use super::status::invalid;
use crate::auth::{Action, Principal};

/// The actions, with what ListActions says of each.
pub(crate) const ACTIONS: [(&str, &str); 3] = [
    (
        "init_writer",
        "a new idempotent writer id: {} -> {\"writer_id\"}; send it with a sequence in each batch's app_metadata",
    ),
    (
        "offsets",
        "a bucket's offsets: {\"table\", \"partition\", \"bucket\"} -> {\"log_start\", \"high_watermark\"}",
    ),
    (
        "trim",
        "moves a bucket's log start forward: {\"table\", \"partition\", \"bucket\", \"offset\"} -> {\"log_start\", \"high_watermark\"}",
    ),
];

/// ListActions.
pub(crate) fn list() -> Vec<ActionType> {
    ACTIONS
        .iter()
        .map(|(name, description)| ActionType {
            r#type: (*name).to_owned(),
            description: (*description).to_owned(),
        })
        .collect()
}

/// The body of `offsets` and `trim`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BucketBody {
    table: String,
    partition: Option<String>,
    bucket: u32,
    offset: Option<u64>,
}

impl Flight {
    /// DoAction: the action's one result.
    pub(crate) async fn action(
        self: &Arc<Self>,
        principal: &Principal,
        action: arrow_flight::Action,
    ) -> Result<Vec<u8>, Status> {
        match action.r#type.as_str() {
            "init_writer" => {
                principal.check(Action::Write, None)?;
                let writer_id = self.core.allocate_writer_id().await?;
                Ok(json!({ "writer_id": writer_id }).to_string().into_bytes())
            }
            "offsets" | "trim" => {
                if action.body.len() > 4096 {
                    return Err(invalid("the action body is longer than 4096 bytes"));
                }
                let body: BucketBody = serde_json::from_slice(&action.body)
                    .map_err(|e| invalid(format!("the body of `{}`: {e}", action.r#type)))?;
                let trim = action.r#type == "trim";
                let needed = if trim { Action::Write } else { Action::Read };
                principal.check(needed, Some(&body.table))?;
                let address = BucketAddress {
                    table: body.table,
                    partition: body
                        .partition
                        .unwrap_or_else(|| DEFAULT_PARTITION.to_owned()),
                    bucket: body.bucket,
                };
                let info = self.core.catalog().get(&address.table).await?;
                let log = self.open(&info, &address).await?;
                match (trim, body.offset) {
                    (true, Some(offset)) => log.trim(offset).await?,
                    (true, None) => return Err(invalid("`trim` needs an `offset`")),
                    (false, Some(_)) => return Err(invalid("`offsets` takes no `offset`")),
                    (false, None) => {}
                }
                let offsets = log.offsets();
                Ok(json!({
                    "log_start": offsets.log_start,
                    "high_watermark": offsets.high_watermark,
                })
                .to_string()
                .into_bytes())
            }
            other => Err(Status::unimplemented(format!(
                "no action `{other}`; ListActions names init_writer, offsets and trim"
            ))),
        }
    }
}
