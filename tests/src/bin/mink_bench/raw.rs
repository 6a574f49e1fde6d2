//! The raw store, for baselines: the same kind of store as the node's, on the same disk or server.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mink_s3stream::storage::{
    LatencyProfile, LatencyStorage, ObjectStorage, ObjectStoreBackend, S3Config,
};

use crate::Error;
use crate::args::Store;

pub(crate) fn raw_store(
    store: Store,
    dir: &Path,
    prefix: &str,
) -> Result<Arc<dyn ObjectStorage>, Error> {
    let local = |dir: &Path| -> Result<Arc<dyn ObjectStorage>, Error> {
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        Ok(Arc::new(
            ObjectStoreBackend::local(dir).map_err(|e| format!("local store: {e}"))?,
        ))
    };
    Ok(match store {
        Store::Local => local(dir)?,
        Store::S3Standard => Arc::new(LatencyStorage::new(
            local(dir)?,
            LatencyProfile::s3_standard(),
            7,
        )),
        Store::Moto => {
            let s3 = mink_tests::s3_server();
            let config = S3Config::local_server(
                s3.endpoint,
                s3.bucket,
                mink_tests::S3_REGION,
                mink_tests::S3_ACCESS_KEY_ID,
                mink_tests::S3_SECRET_ACCESS_KEY,
            )
            .with_prefix(prefix.to_owned());
            Arc::new(ObjectStoreBackend::s3(&config).map_err(|e| format!("S3 store: {e}"))?)
        }
    })
}

/// Raw sequential PUT throughput of 8 MiB objects, MB/s, measured for `duration` (as long as the
/// measurement it is the baseline of: a short burst would see only the page cache of local files,
/// or an idle server). The objects are deleted afterwards, outside the timing.
pub(crate) async fn raw_put_throughput(
    raw: &dyn ObjectStorage,
    duration: Duration,
) -> Result<f64, Error> {
    let big = Bytes::from(vec![0x17u8; 8 << 20]);
    let started = Instant::now();
    let mut rounds = 0;
    while started.elapsed() < duration {
        raw.put(&format!("raw/big-{rounds}"), big.clone())
            .await
            .map_err(|e| format!("raw PUT: {e}"))?;
        rounds += 1;
    }
    let mbps = (rounds * big.len()) as f64 / started.elapsed().as_secs_f64() / 1e6;
    for i in 0..rounds {
        raw.delete(&format!("raw/big-{i}"))
            .await
            .map_err(|e| format!("raw DELETE: {e}"))?;
    }
    Ok(mbps)
}

/// Raw PUTs with `inflight` requests in flight at once, of `size`-byte objects, for `duration`:
/// the store's own limit at the node's concurrency and object size. Returns MB/s, each PUT's
/// latency in ms, and this process's CPU seconds per GB written by them. The objects are deleted
/// afterwards, outside the timing.
pub(crate) async fn raw_put_concurrent(
    raw: Arc<dyn ObjectStorage>,
    duration: Duration,
    size: usize,
    inflight: usize,
) -> Result<(f64, Vec<f64>, Option<f64>), Error> {
    let body = Bytes::from(vec![0x2au8; size.max(1)]);
    let cpu0 = crate::node::cpu_seconds(std::process::id());
    let started = Instant::now();
    let mut lanes = Vec::new();
    for lane in 0..inflight.max(1) {
        let (raw, body) = (raw.clone(), body.clone());
        lanes.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while started.elapsed() < duration {
                let key = format!("raw/concurrent-{lane}-{}", latencies.len());
                let sent = Instant::now();
                raw.put(&key, body.clone())
                    .await
                    .map_err(|e| format!("raw PUT: {e}"))?;
                latencies.push(sent.elapsed().as_secs_f64() * 1e3);
            }
            Ok::<_, Error>(latencies)
        }));
    }
    let mut all = Vec::new();
    let mut written = Vec::new();
    for (lane, task) in lanes.into_iter().enumerate() {
        let latencies = task.await.map_err(|e| format!("raw PUT lane: {e}"))??;
        written.push((lane, latencies.len()));
        all.extend(latencies);
    }
    let mbps = (all.len() * body.len()) as f64 / started.elapsed().as_secs_f64() / 1e6;
    let gb = (all.len() * body.len()) as f64 / 1e9;
    let cpu_per_gb = cpu0
        .zip(crate::node::cpu_seconds(std::process::id()))
        .map(|(a, b)| (b - a) / gb.max(1e-9));
    for (lane, n) in written {
        for i in 0..n {
            raw.delete(&format!("raw/concurrent-{lane}-{i}"))
                .await
                .map_err(|e| format!("raw DELETE: {e}"))?;
        }
    }
    Ok((mbps, all, cpu_per_gb))
}

/// `bytes` sent over one loopback TCP connection from the driver to itself, in 1 MiB writes
/// read into one reused 1 MiB buffer: MB/s. No store and no HTTP: the most that any answer
/// crossing a loopback socket on this machine can carry, which bounds every read through the
/// node.
pub(crate) async fn loopback_mbps(bytes: u64) -> Result<f64, Error> {
    use tokio::io::AsyncWriteExt;
    let (listener, addr) = listen("loopback").await?;
    let writer = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await?;
        let chunk = vec![0x5au8; 1 << 20];
        let mut sent = 0u64;
        while sent < bytes {
            let n = chunk.len().min((bytes - sent) as usize);
            socket.write_all(&chunk[..n]).await?;
            sent += n as u64;
        }
        socket.shutdown().await
    });
    let mut socket = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("loopback connect: {e}"))?;
    let started = Instant::now();
    let received = read_all(&mut socket, "loopback").await?;
    let seconds = started.elapsed().as_secs_f64();
    writer
        .await
        .map_err(|e| format!("loopback writer: {e}"))?
        .map_err(|e| format!("loopback write: {e}"))?;
    if received != bytes {
        return Err(format!("loopback: {received} of {bytes} bytes arrived"));
    }
    Ok(received as f64 / seconds / 1e6)
}

/// The objects `keys` read from `store` in sequential whole-object GETs, as the raw GET baseline
/// reads them, and written into a loopback TCP socket as they arrive (the next GET overlapping
/// the current write), read to the end on the other side: MB/s. What the simplest relay of this
/// store's bytes through a socket carries on this machine, with no format, cache or protocol.
pub(crate) async fn relay_mbps(
    store: Arc<dyn ObjectStorage>,
    keys: Vec<String>,
) -> Result<f64, Error> {
    use tokio::io::AsyncWriteExt;
    let (listener, addr) = listen("relay").await?;
    let started = Instant::now();
    let (objects, mut arrived) = tokio::sync::mpsc::channel::<Bytes>(1);
    let reader = tokio::spawn(async move {
        for key in keys {
            let object = store
                .get(&key)
                .await
                .map_err(|e| format!("relay GET {key}: {e}"))?;
            if objects.send(object).await.is_err() {
                break;
            }
        }
        Ok::<_, Error>(())
    });
    let writer = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await?;
        let mut sent = 0u64;
        while let Some(object) = arrived.recv().await {
            socket.write_all(&object).await?;
            sent += object.len() as u64;
        }
        socket.shutdown().await?;
        Ok::<_, std::io::Error>(sent)
    });
    let mut socket = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("relay connect: {e}"))?;
    let received = read_all(&mut socket, "relay").await?;
    let seconds = started.elapsed().as_secs_f64();
    reader.await.map_err(|e| format!("relay reader: {e}"))??;
    let sent = writer
        .await
        .map_err(|e| format!("relay writer: {e}"))?
        .map_err(|e| format!("relay write: {e}"))?;
    if received != sent {
        return Err(format!("relay: {received} of {sent} bytes arrived"));
    }
    Ok(received as f64 / seconds / 1e6)
}

/// A listener on a free loopback port, and its address.
async fn listen(what: &str) -> Result<(tokio::net::TcpListener, std::net::SocketAddr), Error> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("{what} listen: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("{what} address: {e}"))?;
    Ok((listener, addr))
}

/// Reads `socket` to its end in 1 MiB reads: the bytes received.
async fn read_all(socket: &mut tokio::net::TcpStream, what: &str) -> Result<u64, Error> {
    use tokio::io::AsyncReadExt;
    let mut buffer = vec![0u8; 1 << 20];
    let mut received = 0u64;
    loop {
        let n = socket
            .read(&mut buffer)
            .await
            .map_err(|e| format!("{what} read: {e}"))?;
        if n == 0 {
            return Ok(received);
        }
        received += n as u64;
    }
}
