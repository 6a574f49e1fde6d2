//! Column projection: rewriting batches to a subset of their columns.
//!
//! A [`Projection`] is prepared once per (schema, columns) pair and reused for every batch of that
//! schema: it holds the column indices, the projected schema and the scratch space of the rewrite.
//! Each batch is checked as a decode would check it ([`BatchView::check_header`], the Arrow
//! message's framing, buffer ranges, node counts and buffer widths against the schema), then its
//! Arrow message is rewritten without decoding rows: a new flatbuffer lists only the projected
//! columns' field nodes, buffers and variadic buffer counts, and the new body is their buffers
//! copied as they are (the `copy` module). The header is the source's with a new length and CRC, so
//! `base_offset`, `commit_timestamp` and `leader_epoch` carry over, and the change-type vector is
//! copied as is. A zero-row batch becomes a bare header, so offsets keep advancing for readers of
//! the projection.
//!
//! The values in the copied buffers are not looked at (no UTF-8 or offset validation): a projected
//! batch is as trustworthy as its source, and whoever decodes it validates it as it would the
//! source.

mod copy;

use arrow_schema::{Schema, SchemaRef};

use crate::error::{Error, Result};
use crate::header::{HEADER_LEN, Header, put, seal_crc};
use crate::ipc;
use crate::view::{BatchBuf, BatchView, batches};

/// A prepared projection of one schema to some of its columns.
#[derive(Debug)]
pub struct Projection {
    schema: SchemaRef,
    indices: Vec<usize>,
    projected: SchemaRef,
    copy: copy::MessageCopy,
    /// Whether the source batches' CRC is left unchecked ([`Projection::trusting_crc`]).
    trust_crc: bool,
}

impl Projection {
    /// Projects `schema` to the columns at `indices`, in that order.
    pub fn new(schema: SchemaRef, indices: &[usize]) -> Result<Self> {
        if indices.is_empty() {
            return Err(Error::EmptyProjection);
        }
        let columns = schema.fields().len();
        for (i, index) in indices.iter().enumerate() {
            if *index >= columns {
                return Err(Error::ColumnOutOfRange {
                    index: *index,
                    columns,
                });
            }
            if indices
                .get(..i)
                .is_some_and(|before| before.contains(index))
            {
                return Err(Error::DuplicateColumn { index: *index });
            }
        }
        ipc::check_schema_fields(schema.fields().iter())?;
        let projected = std::sync::Arc::new(Schema::new_with_metadata(
            indices
                .iter()
                .filter_map(|i| schema.fields().get(*i).cloned())
                .collect::<Vec<_>>(),
            schema.metadata().clone(),
        ));
        Ok(Projection {
            schema,
            indices: indices.to_vec(),
            projected,
            copy: copy::MessageCopy::default(),
            trust_crc: false,
        })
    }

    /// Projects `schema` to the named columns, in that order.
    pub fn by_names<S: AsRef<str>>(schema: SchemaRef, names: &[S]) -> Result<Self> {
        let indices = names
            .iter()
            .map(|name| {
                schema
                    .index_of(name.as_ref())
                    .map_err(|_| Error::UnknownColumn {
                        name: name.as_ref().to_owned(),
                        available: schema.fields().iter().map(|f| f.name().clone()).collect(),
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        Self::new(schema, &indices)
    }

    /// Leaves the source batches' CRC unchecked: for batches read back from storage that checks
    /// its own CRC over every block (a log's reads), where computing the batch's CRC again would
    /// be most of a projection's cost. Every other check stays, so a damaged batch still gives
    /// an error and never a panic; the projected batch gets a CRC of its own.
    pub fn trusting_crc(mut self) -> Self {
        self.trust_crc = true;
        self
    }

    /// The full schema batches are decoded with.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The projected column indices.
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }

    /// The schema of projected batches.
    pub fn projected_schema(&self) -> &SchemaRef {
        &self.projected
    }

    /// Rewrites one batch to the projected columns.
    pub fn project<B: BatchBuf>(&mut self, batch: &BatchView<B>) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.project_into(batch, &mut out)?;
        Ok(out)
    }

    /// Rewrites every batch in `buf` (batches back to back) and concatenates the results.
    pub fn project_all<B: BatchBuf>(&mut self, buf: B) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(buf.as_ref().len());
        for batch in batches(buf) {
            self.project_into(&batch?, &mut out)?;
        }
        Ok(out)
    }

    /// Rewrites one batch to the projected columns, appending it to `out`. On error `out` is left as
    /// it was.
    pub fn project_into<B: BatchBuf>(
        &mut self,
        batch: &BatchView<B>,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let start = out.len();
        let result = self.write(batch, out, start);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    fn write<B: BatchBuf>(
        &mut self,
        batch: &BatchView<B>,
        out: &mut Vec<u8>,
        start: usize,
    ) -> Result<()> {
        if self.trust_crc {
            batch.check_header_trusting_crc()?;
        } else {
            batch.check_header()?;
        }
        let layout = batch.message()?;
        let source: Header = *batch.header();
        out.resize(start + HEADER_LEN, 0);
        if let Some(changes) = batch.change_type_bytes() {
            out.extend_from_slice(changes);
        }
        if let Some(layout) = layout {
            let bytes = batch.as_bytes();
            self.copy.plan(
                bytes,
                batch.position(),
                &layout,
                source.record_count,
                &self.schema,
                &self.indices,
            )?;
            // A zero-row batch's message is checked all the same, then left out.
            if source.record_count > 0 {
                let body = bytes.get(layout.body_start..).unwrap_or_default();
                self.copy.write(body, out, start)?;
            }
        }
        let length = crate::encode::length_field(out.len() - start)?;
        // Every other field is the source's, checked by `check_header`: base_offset, commit_timestamp
        // and leader_epoch (outside the CRC), the writer's fields, attributes and counts.
        let header = Header {
            length,
            crc: 0,
            ..source
        };
        let batch_out = out.get_mut(start..).unwrap_or_default();
        put(batch_out, 0, &header.to_bytes());
        seal_crc(batch_out);
        Ok(())
    }
}
