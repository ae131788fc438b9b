//! Tools of the hostile-input tests: a process's resident memory and its peak (from `/proc`, Linux only),
//! gzip bombs, and raw HTTP over a TCP socket for what a well-behaved client cannot send.

use std::io::Write;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A field of `/proc/PID/status` in KiB (`VmHWM`: peak resident set, `VmRSS`: current). None off Linux.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Resets the process's `VmHWM` to its current RSS (`/proc/PID/clear_refs` ← 5, Linux ≥ 4.0). False when
/// the kernel refuses; the peak then counts from the start of the process.
pub fn reset_peak(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// gzip (best compression) of `head`, then `unit` repeated until the text is `size` bytes, then `tail`.
/// Streams, so building a 64 MiB bomb needs only its compressed size in memory.
pub fn gzip_bomb(head: &str, unit: &str, tail: &str, size: usize) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(head.as_bytes()).unwrap();
    let body = size.saturating_sub(head.len() + tail.len());
    let chunk = unit.repeat((64 * 1024 / unit.len()).max(1));
    let mut left = body / unit.len();
    while left > 0 {
        let n = left.min(chunk.len() / unit.len());
        gz.write_all(&chunk.as_bytes()[..n * unit.len()]).unwrap();
        left -= n;
    }
    gz.write_all(tail.as_bytes()).unwrap();
    gz.finish().unwrap()
}

/// Sends `bytes` as they are on a fresh connection to `addr` and reads the answer until the server closes
/// the connection or `wait` passes; returns what was read (the status line first).
pub async fn raw_http(addr: std::net::SocketAddr, bytes: &[u8], wait: Duration) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(bytes).await.expect("write");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(wait, s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}
