//! Mink's record-batch format.
