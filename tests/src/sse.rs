//! A Server-Sent Events reader for the black-box tests: one `text/event-stream` answer read event by
//! event (`id`, `event`, JSON `data`); comment lines (keep-alives) are skipped.

use std::time::Duration;

use serde_json::Value;

/// One event.
#[derive(Debug, Clone, PartialEq)]
pub struct Sse {
    pub event: String,
    pub id: String,
    pub data: Value,
}

/// How a stream ended: closed by the server, or failed (e.g. the connection was reset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    Closed,
    Failed(String),
}

/// A client reading one stream.
pub struct SseClient {
    resp: reqwest::Response,
    buf: String,
}

impl SseClient {
    /// Opens `url` with `token` (and `Last-Event-ID` when given); the response as it came when it is
    /// not a 200 stream.
    pub async fn open(
        url: &str,
        token: &str,
        last_id: Option<&str>,
    ) -> Result<SseClient, reqwest::Response> {
        // No total timeout (a stream is long-lived): each read is bounded by its own `wait`.
        let client = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .expect("reqwest client");
        let mut req = client.get(url).bearer_auth(token);
        if let Some(id) = last_id {
            req = req.header("Last-Event-ID", id);
        }
        let resp = req.send().await.expect("the stream request is sent");
        let is_stream = resp
            .headers()
            .get("content-type")
            .is_some_and(|v| v == "text/event-stream");
        if resp.status() != 200 || !is_stream {
            return Err(resp);
        }
        Ok(SseClient {
            resp,
            buf: String::new(),
        })
    }

    /// The next event within `wait`, or None (nothing came, or the stream ended).
    pub async fn next(&mut self, wait: Duration) -> Option<Sse> {
        match self.try_next(wait).await {
            Ok(e) => e,
            Err(Ended::Closed) => None,
            Err(Ended::Failed(e)) => panic!("stream failed: {e}"),
        }
    }

    /// The next event within `wait` (None: nothing came), or how the stream ended — for a test that
    /// must tell a quiet stream from one whose server went away.
    pub async fn try_next(&mut self, wait: Duration) -> Result<Option<Sse>, Ended> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let (mut event, mut id, mut data) = (String::new(), String::new(), String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("id:") {
                        id = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim());
                    }
                }
                if event.is_empty() {
                    continue;
                }
                let data = serde_json::from_str(&data).expect("event data is JSON");
                return Ok(Some(Sse { event, id, data }));
            }
            match tokio::time::timeout_at(deadline, self.resp.chunk()).await {
                Ok(Ok(Some(bytes))) => self.buf.push_str(std::str::from_utf8(&bytes).unwrap()),
                Err(_) => return Ok(None),
                Ok(Ok(None)) => return Err(Ended::Closed),
                Ok(Err(e)) => return Err(Ended::Failed(e.to_string())),
            }
        }
    }

    /// Events until none comes for `quiet`.
    pub async fn drain(&mut self, quiet: Duration) -> Vec<Sse> {
        let mut out = vec![];
        while let Some(e) = self.next(quiet).await {
            out.push(e);
        }
        out
    }

    /// Events until one satisfies `stop` (included), or `wait` passes (None).
    pub async fn until(&mut self, wait: Duration, stop: impl Fn(&Sse) -> bool) -> Option<Vec<Sse>> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut out = vec![];
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let e = self.next(left).await?;
            let done = stop(&e);
            out.push(e);
            if done {
                return Some(out);
            }
        }
    }

    /// Events until `done` says the list is complete; panics, showing what came, when it is not
    /// within 10 s.
    pub async fn collect_until(&mut self, done: impl Fn(&[Sse]) -> bool) -> Vec<Sse> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut out = vec![];
        while !done(&out) {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                Some(e) => out.push(e),
                None => panic!("the stream stopped short: {out:#?}"),
            }
        }
        out
    }

    /// The first event, which must be `ready`: its id (the stream's position).
    pub async fn ready(&mut self) -> String {
        let e = self
            .next(Duration::from_secs(5))
            .await
            .expect("the stream's ready event");
        assert_eq!(e.event, "ready", "{e:?}");
        e.id
    }
}
