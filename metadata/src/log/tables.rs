//! Tables: their schema versions, bucket count and partitions.
//!
//! | Key | Value |
//! |---|---|
//! | `mink/tables/{name}` | [`TableRecord`]: name, schema text by schema id, bucket count, partitions |
//!
//! The name is one key segment (no `/`). Schema ids are never reused for a different schema.

use super::Metadata;
use super::read::{SCAN_PAGE, decode_all, get_record};
use crate::error::{InvalidRequest, MetaError, Result};
use crate::keys;
use crate::kv::MetaKvExt;
use crate::records::TableRecord;

impl Metadata {
    /// Creates a table; fails with [`MetaError::AlreadyExists`] if the name is taken.
    pub async fn create_table(&self, table: &TableRecord) -> Result<()> {
        keys::check_segment("table", &table.name)?;
        self.create_record(
            &keys::table(&table.name),
            table,
            "table",
            table.name.clone(),
        )
        .await
    }

    /// Reads a table.
    pub async fn get_table(&self, name: &str) -> Result<Option<TableRecord>> {
        keys::check_segment("table", name)?;
        Ok(get_record::<TableRecord>(&self.kv.get(&keys::table(name)).await?)?.map(|(r, _)| r))
    }

    /// Every table, by name.
    pub async fn list_tables(&self) -> Result<Vec<TableRecord>> {
        decode_all(&self.kv.scan_all(keys::TABLES, SCAN_PAGE).await?)
    }

    /// Adds schema version `schema_id` to a table. Adding the same schema again is a no-op; a
    /// different schema under an existing id is invalid.
    pub async fn add_schema(
        &self,
        name: &str,
        schema_id: u16,
        schema: &str,
    ) -> Result<TableRecord> {
        keys::check_segment("table", name)?;
        let key = keys::table(name);
        self.update_record(
            &key,
            "add schema",
            ("table", name),
            |table: &mut TableRecord| {
                match table.schemas.get(&schema_id) {
                    Some(existing) if existing == schema => {}
                    Some(_) => {
                        return Err(MetaError::Invalid(InvalidRequest::SchemaIdTaken {
                            table: name.to_owned(),
                            schema_id,
                        }));
                    }
                    None => {
                        table.schemas.insert(schema_id, schema.to_owned());
                    }
                }
                Ok(())
            },
        )
        .await
    }

    /// Deletes a table record; returns whether it existed.
    pub async fn delete_table(&self, name: &str) -> Result<bool> {
        keys::check_segment("table", name)?;
        self.kv.delete(&keys::table(name)).await
    }
}
