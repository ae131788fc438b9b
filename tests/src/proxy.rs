//! A TCP proxy between the agent and the ingest that misbehaves on demand.
//!
//! Modes apply to new connections; switching mode cuts every connection in flight (which is a fault of its
//! own: the client sees the connection close mid-request or mid-response).
//! - [`Fault::Pass`]: forward bytes both ways.
//! - [`Fault::Delay`]: forward, after holding each new connection for a while.
//! - [`Fault::Reset`]: accept and close at once with a TCP reset (SO_LINGER 0).
//! - [`Fault::Blackhole`]: accept, read and discard, never answer.
//! - [`Fault::Inject`]: answer the next `count` HTTP requests with `status` (and `Retry-After`) without
//!   forwarding them, then pass again.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does to new connections.
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
}

/// A running proxy; stops when dropped.
pub struct FaultProxy {
    pub addr: SocketAddr,
    state: Arc<Mutex<Fault>>,
    generation: watch::Sender<u64>,
    /// Requests answered by injection so far.
    pub injected: Arc<AtomicU64>,
    /// Connections accepted so far.
    pub connections: Arc<AtomicU64>,
    /// When each connection was accepted and what was done to it (for Retry-After checks).
    pub log: Arc<Mutex<Vec<(Instant, Fault)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on 127.0.0.1 (a port chosen by the OS) and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(Fault::Pass));
        let (generation, gen_rx) = watch::channel(0u64);
        let injected = Arc::new(AtomicU64::new(0));
        let connections = Arc::new(AtomicU64::new(0));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (st, inj, conns, lg) = (
            state.clone(),
            injected.clone(),
            connections.clone(),
            log.clone(),
        );
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                conns.fetch_add(1, Ordering::Relaxed);
                let fault = st.lock().expect("proxy state").clone();
                let fault = match fault {
                    Fault::Inject {
                        status,
                        count,
                        retry_after_secs,
                    } if count > 0 => {
                        let mut s = st.lock().expect("proxy state");
                        *s = if count > 1 {
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
                    Fault::Inject { .. } => Fault::Pass,
                    other => other,
                };
                lg.lock()
                    .expect("proxy log")
                    .push((Instant::now(), fault.clone()));
                let (rx, inj) = (gen_rx.clone(), inj.clone());
                tokio::spawn(handle(client, upstream, fault, rx, inj));
            }
        });
        Ok(FaultProxy {
            addr,
            state,
            generation,
            injected,
            connections,
            log,
            task,
        })
    }

    /// Switches mode and cuts the connections in flight.
    pub fn set(&self, fault: Fault) {
        *self.state.lock().expect("proxy state") = fault;
        self.generation.send_modify(|g| *g += 1);
    }

    /// The current mode.
    pub fn mode(&self) -> Fault {
        self.state.lock().expect("proxy state").clone()
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

async fn handle(
    client: TcpStream,
    upstream: SocketAddr,
    fault: Fault,
    mut cut: watch::Receiver<u64>,
    injected: Arc<AtomicU64>,
) {
    cut.mark_unchanged();
    let work = async {
        match fault {
            Fault::Pass => pipe(client, upstream).await,
            Fault::Delay(d) => {
                tokio::time::sleep(d).await;
                pipe(client, upstream).await
            }
            Fault::Reset => {
                let _ = client.set_zero_linger();
                drop(client);
            }
            Fault::Blackhole => {
                let mut client = client;
                let mut buf = [0u8; 16 * 1024];
                while matches!(client.read(&mut buf).await, Ok(n) if n > 0) {}
            }
            Fault::Inject {
                status,
                retry_after_secs,
                ..
            } => {
                if answer(client, status, retry_after_secs).await {
                    injected.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    };
    tokio::select! {
        _ = work => {}
        _ = cut.changed() => {}
    }
}

async fn pipe(mut client: TcpStream, upstream: SocketAddr) {
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        let _ = client.set_zero_linger();
        return;
    };
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
}

/// Reads one HTTP request (head + Content-Length body) and answers it with `status`. True when answered.
async fn answer(mut client: TcpStream, status: u16, retry_after: Option<u32>) -> bool {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        match client.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        match client.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn roundtrip(addr: SocketAddr, msg: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(msg).await?;
        let mut buf = vec![0u8; msg.len().max(512)];
        let n = tokio::time::timeout(Duration::from_millis(500), s.read(&mut buf))
            .await
            .map_err(|_| std::io::ErrorKind::TimedOut)??;
        buf.truncate(n);
        Ok(buf)
    }

    #[tokio::test]
    async fn proxy_passes_resets_blackholes_and_injects() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        assert_eq!(roundtrip(proxy.addr, b"hello").await.unwrap(), b"hello");

        proxy.set(Fault::Reset);
        assert!(roundtrip(proxy.addr, b"hello")
            .await
            .map(|b| b.is_empty())
            .unwrap_or(true));

        proxy.set(Fault::Blackhole);
        let err = roundtrip(proxy.addr, b"hello").await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);

        proxy.set(Fault::Inject {
            status: 503,
            count: 2,
            retry_after_secs: Some(3),
        });
        for _ in 0..2 {
            let reply = roundtrip(
                proxy.addr,
                b"POST /v1/batches HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}",
            )
            .await
            .unwrap();
            let text = String::from_utf8(reply).unwrap();
            assert!(
                text.starts_with("HTTP/1.1 503") && text.contains("retry-after: 3"),
                "{text}"
            );
        }
        assert_eq!(proxy.mode(), Fault::Pass, "after the burst it passes again");
        assert_eq!(roundtrip(proxy.addr, b"again").await.unwrap(), b"again");
        assert_eq!(proxy.injected.load(Ordering::Relaxed), 2);
    }
}
