//! Where the tablet gets the Arrow schema of a schema id: from its caller, which owns the table's
//! schema registry (the server decodes the schema text stored in the table record).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use arrow_schema::SchemaRef;

/// The Arrow schemas of one table, by schema id.
///
/// # Contract
///
/// `schema` answers from memory and quickly (it is called for every batch of every append and read).
/// A schema id once answered must keep the same schema: batches stored under it are decoded with it.
/// `None` means the id is unknown: appends naming it are rejected with
/// [`TabletError::UnknownSchema`](crate::TabletError::UnknownSchema).
pub trait Schemas: Send + Sync + 'static {
    /// The schema registered under `schema_id`.
    fn schema(&self, schema_id: i16) -> Option<SchemaRef>;
    /// Whether the schema with id `schema_id` is known (checked on every append).
    fn contains(&self, schema_id: i16) -> bool {
        self.schema(schema_id).is_some()
    }
}

/// Compile-time check that [`Schemas`] stays object-safe.
fn _assert_object_safe(_: &dyn Schemas) {}

/// A schema registry held in memory; new versions can be added while tablets use it.
#[derive(Debug, Default)]
pub struct StaticSchemas {
    schemas: RwLock<HashMap<i16, SchemaRef>>,
}

impl StaticSchemas {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry holding `schemas`.
    pub fn with_schemas(schemas: impl IntoIterator<Item = (i16, SchemaRef)>) -> Self {
        StaticSchemas {
            schemas: RwLock::new(schemas.into_iter().collect()),
        }
    }

    /// Registers `schema` under `schema_id` (replacing nothing that is already there: first wins).
    pub fn insert(&self, schema_id: i16, schema: SchemaRef) {
        self.schemas
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(schema_id)
            .or_insert(schema);
    }
}

impl Schemas for StaticSchemas {
    fn schema(&self, schema_id: i16) -> Option<SchemaRef> {
        self.schemas
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&schema_id)
            .map(Arc::clone)
    }

    fn contains(&self, schema_id: i16) -> bool {
        self.schemas
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&schema_id)
    }
}
