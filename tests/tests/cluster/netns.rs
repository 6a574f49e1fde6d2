//! Cutting a node off: a Linux network namespace joined to the host by a veth pair, and TCP
//! proxies on the host end of the pair that forward to the test etcd and S3 server (they listen
//! on the host's loopback, which the namespace cannot reach) and can be cut on their own: a
//! partition from etcd alone, while S3 and the node's clients still reach it.

use std::net::{IpAddr, SocketAddr};
use std::process::Command;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A network namespace with one veth pair to the host.
pub(crate) struct Netns {
    pub(crate) name: String,
    host_if: String,
    pub(crate) host_ip: IpAddr,
    pub(crate) ns_ip: IpAddr,
}

impl Netns {
    /// Creates the namespace and its link (needs root, as these tests run).
    pub(crate) fn create() -> Result<Netns, String> {
        let tag = std::process::id() % 100_000;
        let subnet = 20 + std::process::id() % 200;
        let ns = Netns {
            name: format!("mink-{tag}"),
            host_if: format!("mkh{tag}"),
            host_ip: format!("10.213.{subnet}.1").parse().unwrap(),
            ns_ip: format!("10.213.{subnet}.2").parse().unwrap(),
        };
        let peer = format!("mkn{tag}");
        let (host_cidr, ns_cidr) = (format!("{}/30", ns.host_ip), format!("{}/30", ns.ns_ip));
        ip(&["netns", "add", &ns.name])?;
        ip(&[
            "link",
            "add",
            &ns.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &peer,
        ])?;
        ip(&["link", "set", &peer, "netns", &ns.name])?;
        ip(&["addr", "add", &host_cidr, "dev", &ns.host_if])?;
        ip(&["link", "set", &ns.host_if, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &ns.name, "ip"];
            all.extend_from_slice(args);
            ip(&all)
        };
        inside(&["addr", "add", &ns_cidr, "dev", &peer])?;
        inside(&["link", "set", &peer, "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Takes the link down (nothing passes either way) or brings it back up.
    pub(crate) fn link(&self, up: bool) {
        ip(&["link", "set", &self.host_if, if up { "up" } else { "down" }]).unwrap();
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.host_if]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// A TCP proxy from `addr` to a target; [`Proxy::cut`] holds every connection silent (nothing
/// forwarded either way, new connections accepted and left hanging) until it is healed.
pub(crate) struct Proxy {
    pub(crate) addr: SocketAddr,
    cut: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Proxy {
    pub(crate) async fn start(listen: IpAddr, target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind((listen, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (cut, watching) = watch::channel(false);
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                tokio::spawn(pipe(inbound, target, watching.clone()));
            }
        });
        Proxy { addr, cut, task }
    }

    pub(crate) fn cut(&self, cut: bool) {
        self.cut.send_replace(cut);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pipe(mut inbound: TcpStream, target: SocketAddr, mut cut: watch::Receiver<bool>) {
    // A connection made while cut hangs until the cut heals.
    if cut.wait_for(|c| !*c).await.is_err() {
        return;
    }
    let Ok(mut outbound) = TcpStream::connect(target).await else {
        return;
    };
    let was_cut = tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => false,
        cut = cut.wait_for(|c| *c) => cut.is_ok(),
    };
    if was_cut {
        // Silent while cut; both ends are dropped once it heals, as after a long partition.
        let _ = cut.wait_for(|c| !*c).await;
    }
}
