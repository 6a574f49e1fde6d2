//! What the CLI prints: words and aligned columns for a person at a terminal, JSON (one value,
//! or one per line) when stdout is piped or redirected; progress bars on stderr, only when
//! stderr is a terminal.

use std::io::{IsTerminal, Write};

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;

use crate::client::CliResult;

/// Where output goes and in which form.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Output {
    /// stdout is a terminal: human output.
    pub(crate) human: bool,
}

impl Output {
    pub(crate) fn detect() -> Self {
        Output {
            human: std::io::stdout().is_terminal(),
        }
    }

    /// Prints `human` at a terminal, else `machine` as one JSON line.
    pub(crate) fn say(&self, human: impl FnOnce() -> String, machine: &Value) -> CliResult<()> {
        let text = if self.human {
            human()
        } else {
            machine.to_string()
        };
        write_line(&text)
    }
}

/// Writes a line to stdout; a closed pipe (`mink read | head`) ends quietly as an error the
/// caller stops on.
pub(crate) fn write_line(text: &str) -> CliResult<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").map_err(closed)
}

/// Writes bytes to stdout as they are.
pub(crate) fn write_bytes(bytes: &[u8]) -> CliResult<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(closed)
}

fn closed(e: std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        BROKEN_PIPE.to_owned()
    } else {
        format!("writing to stdout: {e}")
    }
}

/// The error a closed stdout gives: `main` exits quietly on it.
pub(crate) const BROKEN_PIPE: &str = "stdout closed";

/// Rows of cells as aligned columns, with a header row.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = widths.get(i).copied().unwrap_or(0)))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    let mut out = vec![line(header.iter().map(|h| (*h).to_owned()).collect())];
    out.extend(rows.iter().cloned().map(line));
    out.join("\n")
}

/// `1.5 MiB`.
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A progress bar of `len` bytes (or offsets, `unit`) on stderr, hidden when stderr is not a
/// terminal.
pub(crate) fn progress(len: u64, what: &str, in_bytes: bool) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    let counts = if in_bytes {
        "{bytes}/{total_bytes} ({bytes_per_sec}, {eta})"
    } else {
        "{pos}/{len} ({per_sec}, {eta})"
    };
    let template = format!("{what} [{{bar:32}}] {counts}");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_sizes_read_well() {
        let text = table(
            &["NAME", "BUCKETS"],
            &[
                vec!["events".into(), "4".into()],
                vec!["a".into(), "1024".into()],
            ],
        );
        assert_eq!(text, "NAME    BUCKETS\nevents  4\na       1024");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }
}
