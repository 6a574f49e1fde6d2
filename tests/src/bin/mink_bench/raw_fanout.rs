//! The floor of item 13 (fan-out): a bare server, in a process of its own like the node, that
//! holds many parked streaming responses and writes one event to each of them when told to.
//!
//! Each reader is a task of its own parked on a watch channel, as the node's parked readers are;
//! a trigger sets the channel and is answered at once, so the readers are woken before the
//! trigger's answer leaves, as the node wakes its readers before the append's answer. The
//! readers' responses are HTTP/1.1 chunked `text/event-stream` bodies, so the driver reads them
//! with the same lean client and the same search as the node's SSE streams. Nothing is stored,
//! checked, rendered or routed: it is what any server answering 1,000 parked readers through
//! loopback TCP on this machine's two cores can reach, the driver's own reading included.
//!
//! The server is this binary, started with [`SERVER_ENV`] set; it prints its port on a line
//! and serves until killed, or until its standard input closes (the driver that started it
//! exited, however it ended).

use std::io::{BufRead as _, BufReader, Read as _};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::Error;
use crate::rows::ndjson_row;

/// Set in the environment of the child process that serves.
pub(crate) const SERVER_ENV: &str = "MINK_BENCH_RAW_FANOUT_SERVER";

/// The path a trigger GETs, followed by the event's id.
const TRIGGER: &str = "/go/";

/// The server's process, killed when dropped.
pub(crate) struct RawFanout {
    child: Child,
    /// Held open for the server's life: it exits when this closes.
    _stdin: Option<ChildStdin>,
    /// `http://127.0.0.1:PORT`.
    pub(crate) base: String,
}

impl RawFanout {
    /// Starts the server as a child process of this binary.
    pub(crate) async fn start() -> Result<Self, Error> {
        let exe = std::env::current_exe().map_err(|e| format!("raw fan-out: {e}"))?;
        let mut child = Command::new(exe)
            .env(SERVER_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("raw fan-out: start the server: {e}"))?;
        let stdout = child.stdout.take();
        let stdin = child.stdin.take();
        let mut server = Self {
            child,
            _stdin: stdin,
            base: String::new(),
        };
        let stdout = stdout.ok_or("raw fan-out: no stdout")?;
        // One short line, printed as soon as the server listens.
        let line = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line).map(|_| line)
        })
        .await
        .map_err(|e| format!("raw fan-out: {e}"))?
        .map_err(|e| format!("raw fan-out: read the port: {e}"))?;
        let port: u16 = line
            .trim()
            .parse()
            .map_err(|_| format!("raw fan-out: the server printed {line:?}, not a port"))?;
        server.base = format!("http://127.0.0.1:{port}");
        Ok(server)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The URL of a reader's stream.
    pub(crate) fn events(&self) -> String {
        format!("{}/events", self.base)
    }

    /// The URL that wakes every reader with the event of `id`.
    pub(crate) fn trigger(&self, id: u64) -> String {
        format!("{}{TRIGGER}{id}", self.base)
    }
}

/// Serves until killed (the child process's `main`).
pub(crate) async fn serve() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mink_bench raw fan-out server: {e}");
            ExitCode::FAILURE
        }
    }
}

#[expect(
    clippy::print_stdout,
    reason = "the port is the server's output, read by the driver that started it"
)]
async fn run() -> Result<(), Error> {
    // The driver holds our standard input open while it needs us.
    std::thread::spawn(|| {
        let mut byte = [0u8; 1];
        while std::io::stdin().read(&mut byte).is_ok_and(|n| n > 0) {}
        std::process::exit(0);
    });
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    println!("{port}");
    // The id of the newest event, and its chunk as every reader sends it.
    let (events, _) = watch::channel::<Option<(u64, Bytes)>>(None);
    let events = Arc::new(events);
    loop {
        let (stream, _) = listener.accept().await.map_err(|e| e.to_string())?;
        let events = Arc::clone(&events);
        tokio::spawn(async move {
            let _ = connection(stream, &events).await;
        });
    }
}

/// One connection: a reader's stream, or a trigger's requests one after another.
async fn connection(
    mut stream: TcpStream,
    events: &watch::Sender<Option<(u64, Bytes)>>,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buffer = Vec::with_capacity(1024);
    loop {
        let path = read_head(&mut stream, &mut buffer).await?;
        if let Some(id) = path.strip_prefix(TRIGGER) {
            let id: u64 = id.parse().unwrap_or_default();
            events.send_replace(Some((id, event_chunk(id))));
            stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .await?;
            continue;
        }
        let mut newest = events.subscribe();
        newest.borrow_and_update();
        stream
            .write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                  transfer-encoding: chunked\r\n\r\n",
            )
            .await?;
        while newest.changed().await.is_ok() {
            let chunk = newest.borrow_and_update().as_ref().map(|(_, c)| c.clone());
            if let Some(chunk) = chunk {
                stream.write_all(&chunk).await?;
            }
        }
        return Ok(());
    }
}

/// Reads one request head; returns its path.
async fn read_head(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> std::io::Result<String> {
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
            buffer.drain(..end + 4);
            let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
            return Ok(path);
        }
        if stream.read_buf(buffer).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
}

/// The chunk of the event of `id`: an SSE event of the same size as the node's for item 13's
/// 1 KiB row, framed as one chunk of a chunked body.
fn event_chunk(id: u64) -> Bytes {
    let row = ndjson_row(id.saturating_sub(1));
    let row = String::from_utf8_lossy(&row);
    let event = format!("data: [{}]\nid: {id}\n\n", row.trim_end());
    Bytes::from(format!("{:x}\r\n{event}\r\n", event.len()))
}

impl Drop for RawFanout {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
