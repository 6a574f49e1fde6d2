//! Row change types, stored one byte per row in the change-type vector.

/// What a row means for a primary-key table's changelog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum ChangeType {
    /// `+A`: a row of an append-only log.
    AppendOnly = 0,
    /// `+I`: a new row.
    Insert = 1,
    /// `-U`: the old value of an updated row.
    UpdateBefore = 2,
    /// `+U`: the new value of an updated row.
    UpdateAfter = 3,
    /// `-D`: a deleted row.
    Delete = 4,
}

impl ChangeType {
    /// All change types, in byte order.
    pub const ALL: [ChangeType; 5] = [
        ChangeType::AppendOnly,
        ChangeType::Insert,
        ChangeType::UpdateBefore,
        ChangeType::UpdateAfter,
        ChangeType::Delete,
    ];

    /// The byte stored in the change-type vector.
    pub fn to_byte(self) -> u8 {
        self as u8
    }

    /// Parses a change-type byte; `None` if it is not 0..=4.
    pub fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            0 => Some(ChangeType::AppendOnly),
            1 => Some(ChangeType::Insert),
            2 => Some(ChangeType::UpdateBefore),
            3 => Some(ChangeType::UpdateAfter),
            4 => Some(ChangeType::Delete),
            _ => None,
        }
    }

    /// The short name used in Fluss and Flink: `+A`, `+I`, `-U`, `+U`, `-D`.
    pub fn short_name(self) -> &'static str {
        match self {
            ChangeType::AppendOnly => "+A",
            ChangeType::Insert => "+I",
            ChangeType::UpdateBefore => "-U",
            ChangeType::UpdateAfter => "+U",
            ChangeType::Delete => "-D",
        }
    }
}

impl std::fmt::Display for ChangeType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.short_name())
    }
}
