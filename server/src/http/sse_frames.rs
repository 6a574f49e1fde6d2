//! The bytes of server-sent events. Streams send each event as one frame of its own bytes, so an
//! event rendered once (`shared_renders.rs`) goes to every stream that sends it as the same
//! shared buffer, with no copy per stream.

use bytes::Bytes;

/// The comment a parked stream sends to keep idle proxies from closing the connection.
pub(crate) const HEARTBEAT: &[u8] = b": heartbeat\n\n";

/// The frame of one event: its type (`event`; none for the default, `message`), its `id`, and
/// `data` split at every line end into `data` lines, so nothing in the data can end the event
/// or start a field of its own.
pub(crate) fn event(kind: Option<&str>, id: Option<&str>, data: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(data.len() + 32);
    if let Some(kind) = kind {
        field(&mut out, "event", kind.as_bytes());
    }
    if let Some(id) = id {
        field(&mut out, "id", id.as_bytes());
    }
    for line in lines(data) {
        // A reader drops one space after the colon, so a line's own leading space is kept.
        field(&mut out, "data", line);
    }
    out.push(b'\n');
    Bytes::from(out)
}

/// The frame of an event of rows: `id` the offset after them, `data` their JSON array.
pub(crate) fn rows_event(next: u64, data: &[u8]) -> Bytes {
    event(None, Some(&next.to_string()), data)
}

fn field(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.push(b'\n');
}

/// The lines of `text`, split at CR LF, LF and CR.
pub(crate) fn lines(text: &[u8]) -> Vec<&[u8]> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'\n' => {
                lines.push(&text[start..i]);
                start = i + 1;
            }
            b'\r' => {
                lines.push(&text[start..i]);
                if text.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    lines.push(&text[start..]);
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_ends_of_every_kind_split_data_lines() {
        let split = |t: &str| -> Vec<String> {
            lines(t.as_bytes())
                .into_iter()
                .map(|l| String::from_utf8(l.to_vec()).unwrap())
                .collect()
        };
        assert_eq!(split("a"), ["a"]);
        assert_eq!(split("a\nb\r\nc\rd"), ["a", "b", "c", "d"]);
        assert_eq!(split("a\r\n\r\nb"), ["a", "", "b"]);
        assert_eq!(split("a\r\rb\n"), ["a", "", "b", ""]);
    }

    #[test]
    fn an_event_is_its_fields_in_order_then_a_blank_line() {
        assert_eq!(
            &event(None, Some("12"), br#"[{"a":1}]"#)[..],
            b"id: 12\ndata: [{\"a\":1}]\n\n"
        );
        assert_eq!(
            &event(Some("error"), None, b"{}")[..],
            b"event: error\ndata: {}\n\n"
        );
    }

    #[test]
    fn data_cannot_end_the_event_or_add_fields() {
        let frame = event(None, Some("3"), b" x\r\n\r\nid: 9\nevent: error\r");
        assert_eq!(
            &frame[..],
            b"id: 3\ndata:  x\ndata: \ndata: id: 9\ndata: event: error\ndata: \n\n"
        );
        assert_eq!(frame.windows(2).filter(|w| w == b"\n\n").count(), 1);
    }
}
