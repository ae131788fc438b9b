//! A webhook receiver for the alert tests: a real HTTP/1.1 server on a loopback port that records every
//! request (headers and JSON body) and answers as told — fail with a status, answer slowly, or accept.
//! Plain tokio (one request per connection, `Connection: close`), so the tests need no web framework.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How the receiver answers from now on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// 200.
    Accept,
    /// This status (e.g. 503).
    Fail(u16),
    /// 200 after this long (the sender is expected to have given up).
    Slow(Duration),
    /// 302 to this URL (a sender must not follow it).
    Redirect(&'static str),
}

/// One request and what it was answered (0: the answer was not meant to reach the sender in time).
#[derive(Debug, Clone)]
pub struct Received {
    pub headers: Vec<(String, String)>,
    pub body: Value,
    /// The body's bytes as received (what a receiver checks a signature over).
    pub raw: Vec<u8>,
    pub answered: u16,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A running receiver; stops with the test's runtime.
#[derive(Clone)]
pub struct Receiver {
    pub url: String,
    mode: Arc<Mutex<Mode>>,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    pub async fn start(mode: Mode) -> anyhow::Result<Receiver> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/hook", listener.local_addr()?);
        let r = Receiver {
            url,
            mode: Arc::new(Mutex::new(mode)),
            got: Arc::default(),
        };
        let (mode, got) = (r.mode.clone(), r.got.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (mode, got) = (mode.clone(), got.clone());
                tokio::spawn(async move {
                    let _ = serve(stream, mode, got).await;
                });
            }
        });
        Ok(r)
    }

    pub fn set(&self, mode: Mode) {
        *self.mode.lock().expect("not poisoned") = mode;
    }

    pub fn received(&self) -> Vec<Received> {
        self.got.lock().expect("not poisoned").clone()
    }

    /// Requests answered 2xx, per `idempotency_key` of their body.
    pub fn delivered(&self) -> std::collections::BTreeMap<String, usize> {
        let mut m = std::collections::BTreeMap::new();
        for r in self.received() {
            if (200..300).contains(&r.answered) {
                let key = r.body["idempotency_key"].as_str().unwrap_or("").to_string();
                *m.entry(key).or_default() += 1;
            }
        }
        m
    }
}

async fn serve(
    mut stream: tokio::net::TcpStream,
    mode: Arc<Mutex<Mode>>,
    got: Arc<Mutex<Vec<Received>>>,
) -> anyhow::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = stream.read(&mut chunk).await?;
        anyhow::ensure!(n > 0, "closed before the head");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        anyhow::ensure!(buf.len() < 64 * 1024, "head too large");
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let headers: Vec<(String, String)> = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await?;
        anyhow::ensure!(n > 0, "closed before the body");
        buf.extend_from_slice(&chunk[..n]);
    }
    let raw = buf[head_end..head_end + length].to_vec();
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let mode = *mode.lock().expect("not poisoned");
    let (status, answered) = match mode {
        Mode::Accept => (200, 200),
        Mode::Fail(s) => (s, s),
        Mode::Slow(_) => (200, 0),
        Mode::Redirect(_) => (302, 302),
    };
    got.lock().expect("not poisoned").push(Received {
        headers,
        body,
        raw,
        answered,
    });
    if let Mode::Slow(d) = mode {
        tokio::time::sleep(d).await;
    }
    let location = match mode {
        Mode::Redirect(to) => format!("location: {to}\r\n"),
        _ => String::new(),
    };
    let reply =
        format!("HTTP/1.1 {status} X\r\n{location}content-length: 0\r\nconnection: close\r\n\r\n");
    stream.write_all(reply.as_bytes()).await?;
    stream.shutdown().await?;
    Ok(())
}
