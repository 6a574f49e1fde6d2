//! A lean HTTP/1.1 client for the fan-out item: GETs on one kept-alive TCP connection, each
//! response's head parsed and its body (chunked or of a known length) decoded in place. With a
//! thousand readers on the same two cores as the node, reqwest's connection task and body
//! channel (two task wakes and a copy per read) were part of the latency being measured; a
//! reader here wakes once per socket read and copies nothing but the decoded bytes.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::Error;

/// How long a reader waits for the bytes it wants.
const WAIT: Duration = Duration::from_secs(20);

/// How the body of the current response is framed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Framing {
    Chunked,
    /// Bytes of the body still to read.
    Length(usize),
}

pub(crate) struct Connection {
    host: String,
    stream: TcpStream,
    /// Bytes read and not yet decoded (a head, a chunk's size line or data cut by a read).
    raw: Vec<u8>,
    /// The decoded body since the last match was forgotten.
    text: Vec<u8>,
    /// How much of `text` has been searched without a match (the needles' length less one is
    /// searched again, in case a match began there).
    searched: usize,
    framing: Framing,
    /// The response's body has ended.
    ended: bool,
}

impl Connection {
    /// Connects to the node of `url` (`http://host:port/...`).
    pub(crate) async fn connect(url: &str) -> Result<Self, Error> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("lean HTTP: {url} is not an http:// URL"))?;
        let host = &rest[..rest.find('/').unwrap_or(rest.len())];
        let stream = TcpStream::connect(host)
            .await
            .map_err(|e| format!("lean HTTP: connect to {host}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Self {
            host: host.to_owned(),
            stream,
            raw: Vec::with_capacity(16 << 10),
            text: Vec::with_capacity(16 << 10),
            searched: 0,
            framing: Framing::Length(0),
            ended: true,
        })
    }

    /// Sends a GET of `url`'s path and reads the response's head: a status other than 200 is an
    /// error. The previous response's body must have been read to its end.
    pub(crate) async fn get(&mut self, url: &str, accept: &str) -> Result<(), Error> {
        if !self.ended {
            return Err("lean HTTP: a GET before the last body ended".into());
        }
        let path = url
            .strip_prefix("http://")
            .and_then(|rest| rest.find('/').map(|at| &rest[at..]))
            .ok_or_else(|| format!("lean HTTP: {url} has no path"))?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nhost: {}\r\naccept: {accept}\r\n\r\n",
            self.host
        );
        self.stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("lean HTTP: send the request: {e}"))?;
        let end = loop {
            if let Some(at) = find(&self.raw, b"\r\n\r\n") {
                break at;
            }
            self.fill().await?;
        };
        let head = String::from_utf8_lossy(&self.raw[..end]).to_ascii_lowercase();
        self.raw.drain(..end + 4);
        let status = head.lines().next().unwrap_or_default().to_owned();
        if !status.starts_with("http/1.1 200") {
            return Err(format!("lean HTTP: {url} answered {status}"));
        }
        let length = head.lines().find_map(|line| {
            let value = line.strip_prefix("content-length:")?;
            value.trim().parse::<usize>().ok()
        });
        self.framing = match length {
            Some(length) => Framing::Length(length),
            None if head.contains("transfer-encoding: chunked") => Framing::Chunked,
            None => return Err(format!("lean HTTP: {url} answered a body of no known end")),
        };
        self.ended = false;
        self.text.clear();
        self.searched = 0;
        Ok(())
    }

    /// Reads until the decoded body holds one of `wants`, then forgets the body up to the end of
    /// the first one found.
    pub(crate) async fn read_until(&mut self, wants: &[&[u8]]) -> Result<(), Error> {
        let overlap = wants.iter().map(|w| w.len()).max().unwrap_or(1) - 1;
        loop {
            self.decode()?;
            let from = self.searched.saturating_sub(overlap);
            let found = wants
                .iter()
                .filter_map(|w| find(&self.text[from..], w).map(|at| from + at + w.len()))
                .min();
            if let Some(end) = found {
                self.text.drain(..end);
                self.searched = 0;
                return Ok(());
            }
            self.searched = self.text.len();
            if self.ended {
                return Err("lean HTTP: the body ended".into());
            }
            self.fill().await?;
        }
    }

    /// Reads the body to its end; returns its decoded length.
    pub(crate) async fn read_to_end(&mut self) -> Result<usize, Error> {
        loop {
            self.decode()?;
            if self.ended {
                let length = self.text.len();
                self.text.clear();
                self.searched = 0;
                return Ok(length);
            }
            self.fill().await?;
        }
    }

    /// One read from the socket into `raw`.
    async fn fill(&mut self) -> Result<(), Error> {
        let read = tokio::time::timeout(WAIT, self.stream.read_buf(&mut self.raw))
            .await
            .map_err(|_| "lean HTTP: nothing within 20 s".to_owned())?
            .map_err(|e| format!("lean HTTP: {e}"))?;
        if read == 0 {
            return Err("lean HTTP: the node closed the connection".into());
        }
        Ok(())
    }

    /// Moves what `raw` holds of the body into `text`: whole chunks, or up to the length.
    fn decode(&mut self) -> Result<(), Error> {
        if self.ended {
            return Ok(());
        }
        let mut at = 0;
        match &mut self.framing {
            Framing::Length(left) => {
                let take = (*left).min(self.raw.len());
                self.text.extend_from_slice(&self.raw[..take]);
                *left -= take;
                at = take;
                self.ended = *left == 0;
            }
            Framing::Chunked => {
                while let Some(line) = find(&self.raw[at..], b"\r\n") {
                    let size = std::str::from_utf8(&self.raw[at..at + line])
                        .ok()
                        .map(|s| s.split(';').next().unwrap_or_default().trim())
                        .and_then(|s| usize::from_str_radix(s, 16).ok())
                        .ok_or("lean HTTP: a malformed chunk size")?;
                    let data = at + line + 2;
                    // The last chunk is followed by an empty line (no trailers are sent).
                    if self.raw.len() < data + size + 2 {
                        break;
                    }
                    self.text.extend_from_slice(&self.raw[data..data + size]);
                    at = data + size + 2;
                    if size == 0 {
                        self.ended = true;
                        break;
                    }
                }
            }
        }
        self.raw.drain(..at);
        Ok(())
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(haystack, needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `bytes` one at a time, so that every head, size line and chunk is cut by reads.
    async fn trickle(socket: &mut TcpStream, bytes: &[u8]) {
        for b in bytes {
            socket.write_all(&[*b]).await.unwrap();
            socket.flush().await.unwrap();
        }
    }

    #[tokio::test]
    async fn chunked_and_sized_bodies_cut_anywhere_are_decoded() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/s?live=sse", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = vec![0u8; 1024];
            let n = socket.read(&mut request).await.unwrap();
            assert!(request[..n].starts_with(b"GET /s?live=sse HTTP/1.1\r\n"));
            trickle(
                &mut socket,
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
                  7\r\nid: 1\n\n\r\n13\r\n: keep-alive\nid: 2\n\r\n0\r\n\r\n",
            )
            .await;
            let n = socket.read(&mut request).await.unwrap();
            assert!(request[..n].starts_with(b"GET /s?live=sse HTTP/1.1\r\n"));
            trickle(
                &mut socket,
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            )
            .await;
            let n = socket.read(&mut request).await.unwrap();
            assert!(n > 0);
            trickle(&mut socket, b"HTTP/1.1 503 Service Unavailable\r\n\r\n").await;
        });
        let mut c = Connection::connect(&url).await.unwrap();
        c.get(&url, "text/event-stream").await.unwrap();
        c.read_until(&[b"id: 1\n"]).await.unwrap();
        c.read_until(&[b"nothing", b"id: 2\n"]).await.unwrap();
        let end = c.read_until(&[b"id: 3\n"]).await.unwrap_err();
        assert!(end.contains("ended"), "{end}");
        c.get(&url, "*/*").await.unwrap();
        assert_eq!(c.read_to_end().await.unwrap(), 5);
        let refused = c.get(&url, "*/*").await.unwrap_err();
        assert!(refused.contains("503"), "{refused}");
        server.await.unwrap();
    }
}
