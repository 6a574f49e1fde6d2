//! Column projection: rewriting batches to a subset of their columns.
//!
//! A [`Projection`] is prepared once per (schema, columns) pair and reused for every batch of that schema:
//! it holds the column indices, the projected schema and an [`Encoder`] whose buffers are reused. Each
//! batch is checked ([`BatchView::check_header`] plus the Arrow message checks), only the projected
//! columns are decoded (the other columns' buffers are skipped, not read), and they are re-encoded under a
//! copy of the source header with a new length and CRC. A zero-row batch becomes a bare header, so offsets
//! keep advancing for readers of the projection.

use arrow_schema::{Schema, SchemaRef};

use crate::encode::{BatchMeta, ChangeBytes, Encoder};
use crate::error::{Error, Result, field};
use crate::header::{Header, put};
use crate::ipc;
use crate::view::{BatchBuf, BatchView, batches};

/// A prepared projection of one schema to some of its columns.
#[derive(Debug)]
pub struct Projection {
    schema: SchemaRef,
    indices: Vec<usize>,
    projected: SchemaRef,
    encoder: Encoder,
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
            encoder: Encoder::new(),
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
        let rows = batch.decode_rows(&self.schema, Some(&self.indices))?;
        let source: Header = *batch.header();
        let meta = BatchMeta {
            schema_id: source.schema_id,
            writer_id: source.writer_id,
            batch_sequence: source.batch_sequence,
            counts_records: source.counts_records(),
        };
        let changes = batch.change_type_bytes().map(ChangeBytes::Raw);
        if rows.num_rows() != usize::try_from(source.record_count).unwrap_or(usize::MAX) {
            return Err(Error::CountMismatch {
                field: field::ARROW_LENGTH,
                position: batch.position(),
                expected: i64::from(source.record_count),
                actual: i64::try_from(rows.num_rows()).unwrap_or(i64::MAX),
            });
        }
        self.encoder.write(&rows, changes, meta, out, start)?;
        // Carry over the fields the tablet assigned; they sit outside the CRC.
        let batch_out = out.get_mut(start..).unwrap_or_default();
        put(
            batch_out,
            crate::header::pos::BASE_OFFSET,
            &source.base_offset.to_le_bytes(),
        );
        put(
            batch_out,
            crate::header::pos::COMMIT_TIMESTAMP,
            &source.commit_timestamp.to_le_bytes(),
        );
        put(
            batch_out,
            crate::header::pos::LEADER_EPOCH,
            &source.leader_epoch.to_le_bytes(),
        );
        Ok(())
    }
}
