//! Just enough HTTP/1.1 framing for the fault proxy to see requests, not only connections.
//!
//! The agent's client keeps connections alive, so "no connection was opened" says little about "no
//! request was sent": the proxy reads every message whole (head, then a `Content-Length` or chunked
//! body, or — for a response without either — everything until the server closes) and forwards it
//! byte for byte. Nothing is re-encoded; the parsed head is only used to find the end of the message,
//! to count it and to log it.

use std::io::Read;

use tokio::io::{AsyncRead, AsyncReadExt};

/// One HTTP message as it crossed the wire.
#[derive(Debug, Clone, Default)]
pub struct Message {
    /// The start line (`POST /v1/batches HTTP/1.1`, `HTTP/1.1 200 OK`).
    pub start: String,
    /// Header names lower-cased, values trimmed.
    pub headers: Vec<(String, String)>,
    /// Every byte of the message (head and framed body), to forward unchanged.
    pub raw: Vec<u8>,
    /// The body without chunk framing (still content-encoded).
    pub body: Vec<u8>,
}

impl Message {
    /// The first value of a header (name in lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// `POST /v1/batches` of a request's start line.
    pub fn method_and_path(&self) -> String {
        self.start
            .rsplit_once(' ')
            .map_or(self.start.clone(), |(m, _)| m.to_string())
    }

    /// The status code of a response.
    pub fn status(&self) -> Option<u16> {
        self.start.split(' ').nth(1)?.parse().ok()
    }

    /// Whether either side asked to close the connection after this message.
    pub fn closes(&self) -> bool {
        self.header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }

    /// The body as text, gunzipped when `Content-Encoding: gzip` (other encodings are returned as is).
    pub fn body_text(&self) -> String {
        if self
            .header("content-encoding")
            .is_some_and(|e| e.eq_ignore_ascii_case("gzip"))
        {
            let mut out = String::new();
            if flate2::read::GzDecoder::new(&self.body[..])
                .read_to_string(&mut out)
                .is_ok()
            {
                return out;
            }
        }
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Reads HTTP messages from one direction of a connection, keeping what it read past a message's end.
pub struct Reader<R> {
    inner: R,
    buf: Vec<u8>,
    eof: bool,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    pub fn new(inner: R) -> Reader<R> {
        Reader {
            inner,
            buf: Vec::new(),
            eof: false,
        }
    }

    /// Reads more bytes into the buffer; false at end of stream.
    async fn fill(&mut self) -> std::io::Result<bool> {
        if self.eof {
            return Ok(false);
        }
        let mut chunk = [0u8; 16 * 1024];
        let n = self.inner.read(&mut chunk).await?;
        if n == 0 {
            self.eof = true;
            return Ok(false);
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(true)
    }

    /// Takes `n` bytes (reading as needed) or fails at end of stream.
    async fn take(&mut self, n: usize) -> std::io::Result<Vec<u8>> {
        while self.buf.len() < n {
            if !self.fill().await? {
                return Err(truncated());
            }
        }
        Ok(self.buf.drain(..n).collect())
    }

    /// Takes one line including its CRLF.
    async fn line(&mut self) -> std::io::Result<Vec<u8>> {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                return Ok(self.buf.drain(..i + 2).collect());
            }
            if !self.fill().await? {
                return Err(truncated());
            }
        }
    }

    /// The next request; `None` when the client closed between requests.
    pub async fn request(&mut self) -> std::io::Result<Option<Message>> {
        self.message(None).await
    }

    /// The response to a request with `method`.
    pub async fn response(&mut self, method: &str) -> std::io::Result<Message> {
        self.message(Some(method)).await?.ok_or_else(truncated)
    }

    async fn message(&mut self, answering: Option<&str>) -> std::io::Result<Option<Message>> {
        let head_end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if !self.fill().await? {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(truncated())
                };
            }
        };
        let raw: Vec<u8> = self.buf.drain(..head_end).collect();
        let text = String::from_utf8_lossy(&raw).into_owned();
        let mut lines = text.split("\r\n");
        let start = lines.next().unwrap_or_default().to_string();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let mut msg = Message {
            start,
            headers,
            raw,
            body: Vec::new(),
        };
        let chunked = msg
            .header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        let length: Option<usize> = msg.header("content-length").and_then(|v| v.parse().ok());
        let bodiless = match answering {
            Some(method) => {
                method.eq_ignore_ascii_case("HEAD")
                    || msg
                        .status()
                        .is_some_and(|s| s < 200 || s == 204 || s == 304)
            }
            None => false,
        };
        if bodiless {
        } else if chunked {
            self.chunked_body(&mut msg).await?;
        } else if let Some(n) = length {
            let body = self.take(n).await?;
            msg.raw.extend_from_slice(&body);
            msg.body = body;
        } else if answering.is_some() {
            // A response framed by the end of the connection.
            while self.fill().await? {}
            let body = std::mem::take(&mut self.buf);
            msg.raw.extend_from_slice(&body);
            msg.body = body;
        }
        Ok(Some(msg))
    }

    async fn chunked_body(&mut self, msg: &mut Message) -> std::io::Result<()> {
        loop {
            let line = self.line().await?;
            msg.raw.extend_from_slice(&line);
            let size_text = String::from_utf8_lossy(&line);
            let size_text = size_text.trim().split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_text, 16).map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, "bad chunk size")
            })?;
            if size == 0 {
                // Trailers, then the empty line.
                loop {
                    let t = self.line().await?;
                    msg.raw.extend_from_slice(&t);
                    if t == b"\r\n" {
                        return Ok(());
                    }
                }
            }
            let data = self.take(size + 2).await?;
            msg.body.extend_from_slice(&data[..size]);
            msg.raw.extend_from_slice(&data);
        }
    }
}

fn truncated() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "connection closed mid-message",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn messages_are_framed_by_length_by_chunks_and_by_close() {
        let wire: &[u8] =
            b"POST /a HTTP/1.1\r\ncontent-length: 3\r\n\r\nabcGET /b HTTP/1.1\r\nhost: x\r\n\r\n";
        let mut r = Reader::new(wire);
        let a = r.request().await.unwrap().unwrap();
        assert_eq!(
            (a.method_and_path().as_str(), &a.body[..]),
            ("POST /a", &b"abc"[..])
        );
        let b = r.request().await.unwrap().unwrap();
        assert_eq!((b.method_and_path().as_str(), b.body.len()), ("GET /b", 0));
        assert!(
            r.request().await.unwrap().is_none(),
            "clean end between requests"
        );

        let wire: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=1\r\nde\r\n0\r\n\r\nHTTP/1.1 503 No\r\n\r\nrest";
        let mut r = Reader::new(wire);
        let a = r.response("POST").await.unwrap();
        assert_eq!((a.status(), &a.body[..]), (Some(200), &b"abcde"[..]));
        assert!(a.raw.ends_with(b"0\r\n\r\n"));
        let b = r.response("POST").await.unwrap();
        assert_eq!((b.status(), &b.body[..]), (Some(503), &b"rest"[..]));

        let mut r = Reader::new(&b"POST /c HTTP/1.1\r\ncontent-length: 9\r\n\r\nabc"[..]);
        assert!(r.request().await.is_err(), "a body cut short is an error");
    }
}
