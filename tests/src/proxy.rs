//! A proxy between the agent and the ingest that sees HTTP requests and misbehaves on demand.
//!
//! It reads every request and response whole ([`crate::http_wire`]) and forwards it byte for byte, so it
//! counts **requests**, not connections: the agent's client keeps connections alive, and a test asking
//! "was anything sent?" must count what went over them ([`FaultProxy::requests`]). Each request is logged
//! with its time, the fault applied and its method and path ([`FaultProxy::seen`]); with
//! [`FaultProxy::capture_bodies`] on, its body too (gunzipped), so a test can search the wire for what
//! must never leave the device.
//!
//! Connection-level modes apply to new connections; switching mode cuts every connection in flight (a
//! fault of its own: the client sees the connection close mid-request or mid-response).
//! - [`Fault::Pass`]: forward requests and responses.
//! - [`Fault::Delay`]: forward, after holding each new connection for a while.
//! - [`Fault::Reset`]: accept and close at once with a TCP reset (SO_LINGER 0).
//! - [`Fault::Blackhole`]: accept, read requests (counted) and never answer.
//! - [`Fault::Inject`]: answer the next `count` requests with `status` (and `Retry-After`) without
//!   forwarding them, closing each connection, then pass again.
//! - [`Fault::Hold`]: forward every request only after holding it for a while — what a slow network or
//!   a busy ingest looks like from the agent, and a way to catch the agent with requests in flight
//!   ([`FaultProxy::in_flight`]). A held request is forwarded even if the client gave up meanwhile, as a
//!   request already on the wire would be.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::http_wire::{Message, Reader};

/// What the proxy does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    Pass,
    Delay(Duration),
    Reset,
    Blackhole,
    Inject {
        status: u16,
        count: u32,
        retry_after_secs: Option<u32>,
    },
    Hold(Duration),
}

/// One request the proxy received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    /// What was done to it.
    pub fault: Fault,
    /// `POST /v1/batches`
    pub request: String,
    /// The body as text (gunzipped), when capturing.
    pub body: Option<String>,
}

/// A running proxy; stops when dropped.
pub struct FaultProxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    generation: watch::Sender<u64>,
    /// Requests answered by injection so far.
    pub injected: Arc<AtomicU64>,
    /// Connections accepted so far.
    pub connections: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

/// State the connection tasks share with the handle.
struct Shared {
    upstream: SocketAddr,
    mode: Mutex<Fault>,
    injected: Arc<AtomicU64>,
    connections: Arc<AtomicU64>,
    requests: AtomicU64,
    in_flight: AtomicI64,
    capture: AtomicBool,
    seen: Mutex<Vec<Seen>>,
}

impl FaultProxy {
    /// Listens on 127.0.0.1 (a port chosen by the OS) and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (generation, gen_rx) = watch::channel(0u64);
        let shared = Arc::new(Shared {
            upstream,
            mode: Mutex::new(Fault::Pass),
            injected: Arc::default(),
            connections: Arc::default(),
            requests: AtomicU64::new(0),
            in_flight: AtomicI64::new(0),
            capture: AtomicBool::new(false),
            seen: Mutex::new(Vec::new()),
        });
        let sh = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                sh.connections.fetch_add(1, Ordering::Relaxed);
                let fault = sh.mode.lock().expect("proxy mode").clone();
                tokio::spawn(handle(client, fault, gen_rx.clone(), sh.clone()));
            }
        });
        Ok(FaultProxy {
            addr,
            injected: shared.injected.clone(),
            connections: shared.connections.clone(),
            shared,
            generation,
            task,
        })
    }

    /// Switches mode and cuts the connections in flight.
    pub fn set(&self, fault: Fault) {
        *self.shared.mode.lock().expect("proxy mode") = fault;
        self.generation.send_modify(|g| *g += 1);
    }

    /// The current mode.
    pub fn mode(&self) -> Fault {
        self.shared.mode.lock().expect("proxy mode").clone()
    }

    /// HTTP requests received so far (whatever was done with them).
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// Requests being held or forwarded and not yet answered (a blackholed one is not counted).
    pub fn in_flight(&self) -> i64 {
        self.shared.in_flight.load(Ordering::SeqCst)
    }

    /// Every request so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().expect("proxy log").clone()
    }

    /// Keep the bodies of the requests from now on (in [`Seen::body`]).
    pub fn capture_bodies(&self, on: bool) {
        self.shared.capture.store(on, Ordering::SeqCst);
    }

    /// `http://addr`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.generation.send_modify(|g| *g += 1);
    }
}

async fn handle(client: TcpStream, fault: Fault, mut cut: watch::Receiver<u64>, sh: Arc<Shared>) {
    cut.mark_unchanged();
    let work = async {
        match fault {
            Fault::Reset => {
                let _ = client.set_zero_linger();
            }
            Fault::Delay(d) => {
                tokio::time::sleep(d).await;
                serve(client, &sh).await;
            }
            _ => serve(client, &sh).await,
        }
    };
    tokio::select! {
        _ = work => {}
        _ = cut.changed() => {}
    }
}

/// What to do with one request, decided when it arrives (an injection burst counts down per request).
fn decide(sh: &Shared) -> Fault {
    let mut mode = sh.mode.lock().expect("proxy mode");
    match mode.clone() {
        Fault::Inject {
            status,
            count,
            retry_after_secs,
        } if count > 0 => {
            *mode = if count > 1 {
                Fault::Inject {
                    status,
                    count: count - 1,
                    retry_after_secs,
                }
            } else {
                Fault::Pass
            };
            Fault::Inject {
                status,
                count,
                retry_after_secs,
            }
        }
        Fault::Inject { .. } | Fault::Delay(_) => Fault::Pass,
        other => other,
    }
}

/// Serves one client connection request by request until either side closes.
async fn serve(client: TcpStream, sh: &Shared) {
    let (client_rx, mut client_tx) = client.into_split();
    let mut requests = Reader::new(client_rx);
    let mut upstream: Option<(Reader<tokio::net::tcp::OwnedReadHalf>, _)> = None;
    while let Ok(Some(req)) = requests.request().await {
        sh.requests.fetch_add(1, Ordering::SeqCst);
        let fault = decide(sh);
        sh.seen.lock().expect("proxy log").push(Seen {
            at: Instant::now(),
            fault: fault.clone(),
            request: req.method_and_path(),
            body: sh.capture.load(Ordering::SeqCst).then(|| req.body_text()),
        });
        sh.in_flight.fetch_add(1, Ordering::SeqCst);
        let _done = InFlight(&sh.in_flight);
        match fault {
            Fault::Blackhole => {
                // Never answered: keep reading (and counting) until the client gives up.
                continue;
            }
            Fault::Inject {
                status,
                retry_after_secs,
                ..
            } => {
                if answer(&mut client_tx, status, retry_after_secs).await {
                    sh.injected.fetch_add(1, Ordering::Relaxed);
                }
                return;
            }
            Fault::Hold(d) => tokio::time::sleep(d).await,
            _ => {}
        }
        if upstream.is_none() {
            let Ok(server) = TcpStream::connect(sh.upstream).await else {
                return;
            };
            let (rx, tx) = server.into_split();
            upstream = Some((Reader::new(rx), tx));
        }
        let (server_rx, server_tx) = upstream.as_mut().expect("connected");
        let Ok(resp) = relay(&req, server_rx, server_tx).await else {
            return;
        };
        if client_tx.write_all(&resp.raw).await.is_err() || resp.closes() || req.closes() {
            return;
        }
    }
}

/// Sends `req` upstream and reads the whole response.
async fn relay(
    req: &Message,
    server_rx: &mut Reader<tokio::net::tcp::OwnedReadHalf>,
    server_tx: &mut tokio::net::tcp::OwnedWriteHalf,
) -> std::io::Result<Message> {
    server_tx.write_all(&req.raw).await?;
    let method = req.start.split(' ').next().unwrap_or("GET").to_string();
    server_rx.response(&method).await
}

/// Decrements the in-flight gauge when a request's handling ends, however it ends.
struct InFlight<'a>(&'a AtomicI64);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Answers one request with `status` and closes. True when answered.
async fn answer(
    client: &mut tokio::net::tcp::OwnedWriteHalf,
    status: u16,
    retry_after: Option<u32>,
) -> bool {
    let body = format!(
        "{{\"error\":{{\"code\":\"injected\",\"message\":\"fault proxy answered {status}\"}}}}"
    );
    let retry = retry_after
        .map(|s| format!("retry-after: {s}\r\n"))
        .unwrap_or_default();
    let reply = format!(
        "HTTP/1.1 {status} Injected\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{retry}connection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(reply.as_bytes()).await.is_ok() && client.shutdown().await.is_ok()
}

/// `"N requests"`, followed by the first few (`: POST /v1/batches, ...`) — for assertion messages.
pub fn summary(seen: &[Seen]) -> String {
    let mut out = format!("{} requests", seen.len());
    if !seen.is_empty() {
        let first: Vec<&str> = seen.iter().take(5).map(|s| s.request.as_str()).collect();
        out += &format!(
            ": {}{}",
            first.join(", "),
            if seen.len() > 5 { ", ..." } else { "" }
        );
    }
    out
}

/// A tiny HTTP upstream for the proxy's own tests: answers every request `200` with its path as body.
pub async fn echo_upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (rx, mut tx) = s.into_split();
                let mut r = Reader::new(rx);
                while let Ok(Some(req)) = r.request().await {
                    let body = req.method_and_path();
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if tx.write_all(reply.as_bytes()).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `n` requests over one keep-alive connection; the bodies of the answers.
    async fn keep_alive(addr: SocketAddr, n: usize) -> std::io::Result<Vec<String>> {
        let s = TcpStream::connect(addr).await?;
        let (rx, mut tx) = s.into_split();
        let mut r = Reader::new(rx);
        let mut out = vec![];
        for i in 0..n {
            let req = format!("POST /v1/batches/{i} HTTP/1.1\r\ncontent-length: 2\r\n\r\n{{}}");
            tx.write_all(req.as_bytes()).await?;
            let resp = tokio::time::timeout(Duration::from_millis(1500), r.response("POST"))
                .await
                .map_err(|_| std::io::ErrorKind::TimedOut)??;
            out.push(format!(
                "{} {}",
                resp.status().unwrap_or(0),
                String::from_utf8_lossy(&resp.body)
            ));
        }
        Ok(out)
    }

    #[tokio::test]
    async fn requests_over_one_kept_alive_connection_are_each_counted() {
        let proxy = FaultProxy::start(echo_upstream().await).await.unwrap();
        let answers = keep_alive(proxy.addr, 3).await.unwrap();
        assert_eq!(
            answers,
            [
                "200 POST /v1/batches/0",
                "200 POST /v1/batches/1",
                "200 POST /v1/batches/2"
            ]
        );
        assert_eq!(proxy.connections.load(Ordering::Relaxed), 1);
        assert_eq!(proxy.requests(), 3, "three requests over one connection");
        let seen: Vec<String> = proxy.seen().into_iter().map(|s| s.request).collect();
        assert_eq!(
            seen,
            [
                "POST /v1/batches/0",
                "POST /v1/batches/1",
                "POST /v1/batches/2"
            ]
        );
        assert_eq!(proxy.in_flight(), 0);
    }

    #[tokio::test]
    async fn proxy_resets_blackholes_injects_and_holds() {
        let proxy = FaultProxy::start(echo_upstream().await).await.unwrap();
        proxy.set(Fault::Reset);
        assert!(keep_alive(proxy.addr, 1).await.is_err());

        proxy.set(Fault::Blackhole);
        let err = keep_alive(proxy.addr, 1).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(
            proxy.requests(),
            1,
            "a blackholed request is still a request"
        );

        proxy.set(Fault::Inject {
            status: 503,
            count: 2,
            retry_after_secs: Some(3),
        });
        for _ in 0..2 {
            let s = TcpStream::connect(proxy.addr).await.unwrap();
            let (rx, mut tx) = s.into_split();
            tx.write_all(b"POST /v1/batches HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}")
                .await
                .unwrap();
            let resp = Reader::new(rx).response("POST").await.unwrap();
            assert_eq!(resp.status(), Some(503));
            assert_eq!(resp.header("retry-after"), Some("3"));
        }
        assert_eq!(proxy.mode(), Fault::Pass, "after the burst it passes again");
        assert_eq!(
            keep_alive(proxy.addr, 1).await.unwrap(),
            ["200 POST /v1/batches/0"]
        );
        assert_eq!(proxy.injected.load(Ordering::Relaxed), 2);

        proxy.set(Fault::Hold(Duration::from_millis(400)));
        let sender = tokio::spawn(keep_alive(proxy.addr, 1));
        let held = crate::procs::wait_for(Duration::from_secs(5), || async {
            (proxy.in_flight() == 1).then_some(())
        })
        .await;
        assert!(held.is_some(), "the request is held in flight");
        assert_eq!(sender.await.unwrap().unwrap(), ["200 POST /v1/batches/0"]);
        assert_eq!(proxy.in_flight(), 0);
    }

    #[tokio::test]
    async fn captured_bodies_are_gunzipped() {
        let proxy = FaultProxy::start(echo_upstream().await).await.unwrap();
        proxy.capture_bodies(true);
        let body = crate::hostile::gzip(b"{\"events\":[]}");
        let s = TcpStream::connect(proxy.addr).await.unwrap();
        let (rx, mut tx) = s.into_split();
        let head = format!(
            "POST /v1/batches HTTP/1.1\r\ncontent-encoding: gzip\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        tx.write_all(head.as_bytes()).await.unwrap();
        tx.write_all(&body).await.unwrap();
        Reader::new(rx).response("POST").await.unwrap();
        assert_eq!(proxy.seen()[0].body.as_deref(), Some("{\"events\":[]}"));
    }
}
