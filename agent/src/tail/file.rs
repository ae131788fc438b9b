//! Blocking reads of one log file: its identity, its head hash, and its complete lines.
//!
//! Reads are positional (`pread`) on a shared handle, so a handle can be kept open across polls (to drain
//! a file that was renamed away) without any seek state.

use std::fs::{File, Metadata};
use std::io;
use std::path::Path;
use std::time::SystemTime;

use sha2::{Digest, Sha256};

/// How many leading bytes the head hash covers.
pub const HEAD_BYTES: u64 = 4096;

const READ_BUF: usize = 64 * 1024;

/// What `stat` says about a file, enough to notice any change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMeta {
    /// `<dev>:<inode>` on unix, `<volume serial>:<file index>` on Windows.
    pub id: String,
    pub len: u64,
    pub modified: Option<SystemTime>,
}

impl FileMeta {
    /// The open file's identity, length and modification time.
    pub fn of(file: &File) -> io::Result<FileMeta> {
        let meta = file.metadata()?;
        Ok(FileMeta::from_parts(file_id(file, &meta)?, &meta))
    }

    fn from_parts(id: String, meta: &Metadata) -> FileMeta {
        FileMeta {
            id,
            len: meta.len(),
            modified: meta.modified().ok(),
        }
    }
}

/// The file at `path`, or `None` when there is none.
pub fn stat(path: &Path) -> io::Result<Option<FileMeta>> {
    let not_found = |e: io::Error| match e.kind() {
        io::ErrorKind::NotFound => Ok(None),
        _ => Err(e),
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) if m.is_file() => m,
        Ok(_) => return Ok(None),
        Err(e) => return not_found(e),
    };
    // Unix: the path's own metadata names the file. Windows: the identity comes from a handle (std's
    // handles share reading, writing and deletion, so this open never blocks a writer or a rename).
    #[cfg(unix)]
    {
        Ok(Some(FileMeta::from_parts(unix_id(&meta), &meta)))
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        match File::open(path) {
            Ok(f) => FileMeta::of(&f).map(Some),
            Err(e) => not_found(e),
        }
    }
}

#[cfg(unix)]
fn unix_id(meta: &Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!("{}:{}", meta.dev(), meta.ino())
}

/// `<dev>:<inode>` on unix.
#[cfg(unix)]
fn file_id(_file: &File, meta: &Metadata) -> io::Result<String> {
    Ok(unix_id(meta))
}

/// `<volume serial>:<file index>` on Windows.
#[cfg(windows)]
fn file_id(file: &File, _meta: &Metadata) -> io::Result<String> {
    crate::platform::windows::file_id(file)
}

#[cfg(not(any(unix, windows)))]
fn file_id(_file: &File, _meta: &Metadata) -> io::Result<String> {
    // No inode here: replacement is then detected by the head hash alone.
    Ok("0:0".to_string())
}

#[cfg(unix)]
fn pread(file: &File, buf: &mut [u8], pos: u64) -> io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(file, buf, pos)
}

#[cfg(windows)]
fn pread(file: &File, buf: &mut [u8], pos: u64) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(file, buf, pos)
}

/// SHA-256 (hex) of the first `min(offset, HEAD_BYTES)` bytes (fewer if the file is now shorter).
pub fn head_hash(file: &File, offset: u64) -> io::Result<String> {
    let want = offset.min(HEAD_BYTES) as usize;
    let mut buf = vec![0u8; want];
    let mut got = 0;
    while got < want {
        match pread(file, &mut buf[got..], got as u64)? {
            0 => break,
            n => got += n,
        }
    }
    Ok(hex::encode(Sha256::digest(&buf[..got])))
}

/// The number of newlines in the first `end` bytes: the line count before a resumed offset.
pub fn count_lines(file: &File, end: u64) -> io::Result<u64> {
    let mut buf = vec![0u8; READ_BUF];
    let (mut pos, mut lines) = (0u64, 0u64);
    while pos < end {
        let want = ((end - pos) as usize).min(READ_BUF);
        let n = pread(file, &mut buf[..want], pos)?;
        if n == 0 {
            break;
        }
        lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        pos += n as u64;
    }
    Ok(lines)
}

/// Bounds of one read.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A longer line (without its newline) is skipped, and reported as too long.
    pub max_line_bytes: usize,
    /// Stop after this many lines.
    pub max_lines: usize,
    /// Stop once the lines read add up to this many bytes.
    pub max_bytes: u64,
}

/// One complete line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawLine {
    /// The line's bytes, without the newline.
    Bytes { offset: u64, bytes: Vec<u8> },
    /// Longer than the limit: skipped unread.
    TooLong { offset: u64, len: u64 },
}

/// Where an over-long line that has no newline yet was scanned to, so the next read does not scan it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkipHint {
    pub line_start: u64,
    pub scanned_to: u64,
}

/// The complete lines read from one offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadLines {
    pub lines: Vec<RawLine>,
    /// The offset just past the last complete line (the start offset when there is none).
    pub end: u64,
    /// True when reading stopped at the end of the file (rather than at a limit).
    pub at_eof: bool,
    pub skip_hint: Option<SkipHint>,
}

/// Reads the complete lines from `start`; a partial last line is left for a later read.
pub fn read_lines(
    file: &File,
    start: u64,
    limits: &Limits,
    hint: Option<SkipHint>,
) -> io::Result<ReadLines> {
    let mut out = ReadLines {
        lines: Vec::new(),
        end: start,
        at_eof: false,
        skip_hint: None,
    };
    let mut buf = vec![0u8; READ_BUF];
    let (mut pos, mut line_start, mut bytes) = (start, start, 0u64);
    let mut current: Vec<u8> = Vec::new();
    let mut too_long = false;
    if let Some(h) = hint.filter(|h| h.line_start == start && h.scanned_to > start) {
        (too_long, pos) = (true, h.scanned_to);
    }
    loop {
        let n = pread(file, &mut buf, pos)?;
        if n == 0 {
            out.at_eof = true;
            out.skip_hint = too_long.then_some(SkipHint {
                line_start,
                scanned_to: pos,
            });
            return Ok(out);
        }
        let mut rest = &buf[..n];
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            let newline_at = pos + (n - rest.len() + i) as u64;
            let line = if too_long || current.len() + i > limits.max_line_bytes {
                RawLine::TooLong {
                    offset: line_start,
                    len: newline_at - line_start,
                }
            } else {
                current.extend_from_slice(&rest[..i]);
                RawLine::Bytes {
                    offset: line_start,
                    bytes: std::mem::take(&mut current),
                }
            };
            (too_long, current) = (false, Vec::new());
            bytes += newline_at + 1 - line_start;
            line_start = newline_at + 1;
            out.lines.push(line);
            out.end = line_start;
            if out.lines.len() >= limits.max_lines || bytes >= limits.max_bytes {
                return Ok(out);
            }
            rest = &rest[i + 1..];
        }
        if !too_long && current.len() + rest.len() > limits.max_line_bytes {
            (too_long, current) = (true, Vec::new());
        } else if !too_long {
            current.extend_from_slice(rest);
        }
        pos += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_line_bytes: 16,
        max_lines: 1000,
        max_bytes: 1 << 20,
    };

    fn file_with(bytes: &[u8]) -> (tempfile::NamedTempFile, File) {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(tmp.path(), bytes).unwrap();
        let file = File::open(tmp.path()).unwrap();
        (tmp, file)
    }

    fn bytes(offset: u64, s: &str) -> RawLine {
        RawLine::Bytes {
            offset,
            bytes: s.as_bytes().to_vec(),
        }
    }

    #[test]
    fn reads_complete_lines_and_leaves_a_partial_one() {
        let (_tmp, file) = file_with(b"one\ntwo\n\nthr");
        let read = read_lines(&file, 0, &LIMITS, None).unwrap();
        assert_eq!(
            read.lines,
            vec![bytes(0, "one"), bytes(4, "two"), bytes(8, "")]
        );
        assert_eq!((read.end, read.at_eof, read.skip_hint), (9, true, None));
        let again = read_lines(&file, 9, &LIMITS, None).unwrap();
        assert_eq!((again.lines.len(), again.end), (0, 9));
    }

    #[test]
    fn a_line_over_the_limit_is_skipped_to_its_newline() {
        let long = "x".repeat(17);
        let (_tmp, file) = file_with(format!("{long}\nok\n{}", "y".repeat(40)).as_bytes());
        let read = read_lines(&file, 0, &LIMITS, None).unwrap();
        assert_eq!(
            read.lines,
            vec![RawLine::TooLong { offset: 0, len: 17 }, bytes(18, "ok")]
        );
        // The unfinished long line is remembered, so the next read does not scan it again.
        let hint = SkipHint {
            line_start: 21,
            scanned_to: 61,
        };
        assert_eq!((read.end, read.skip_hint), (21, Some(hint)));
        // Exactly the limit is fine.
        let (_tmp2, file2) = file_with(format!("{}\n", "z".repeat(16)).as_bytes());
        let read2 = read_lines(&file2, 0, &LIMITS, None).unwrap();
        assert_eq!(read2.lines, vec![bytes(0, &"z".repeat(16))]);
    }

    #[test]
    fn a_skip_hint_resumes_the_scan_where_it_stopped() {
        let (_tmp, file) = file_with(format!("{}\nnext\n", "y".repeat(40)).as_bytes());
        let hint = SkipHint {
            line_start: 0,
            scanned_to: 30,
        };
        let read = read_lines(&file, 0, &LIMITS, Some(hint)).unwrap();
        assert_eq!(
            read.lines,
            vec![RawLine::TooLong { offset: 0, len: 40 }, bytes(41, "next")]
        );
    }

    #[test]
    fn reading_stops_at_the_line_limit() {
        let (_tmp, file) = file_with(b"a\nb\nc\n");
        let limits = Limits {
            max_lines: 2,
            ..LIMITS
        };
        let read = read_lines(&file, 0, &limits, None).unwrap();
        assert_eq!((read.lines.len(), read.end, read.at_eof), (2, 4, false));
    }

    #[test]
    fn lines_longer_than_the_read_buffer_are_read_whole() {
        let line = "q".repeat(READ_BUF * 2 + 7);
        let (_tmp, file) = file_with(format!("{line}\nend\n").as_bytes());
        let limits = Limits {
            max_line_bytes: 1 << 20,
            ..LIMITS
        };
        let read = read_lines(&file, 0, &limits, None).unwrap();
        let next = line.len() as u64 + 1;
        assert_eq!(read.lines, vec![bytes(0, &line), bytes(next, "end")]);
    }

    #[test]
    fn head_hash_and_line_count_cover_the_given_prefix() {
        let (_tmp, file) = file_with(b"a\nb\nc");
        assert_eq!(count_lines(&file, 4).unwrap(), 2);
        assert_eq!(count_lines(&file, 100).unwrap(), 2);
        assert_eq!(
            head_hash(&file, 2).unwrap(),
            hex::encode(Sha256::digest(b"a\n"))
        );
        assert_eq!(
            head_hash(&file, 0).unwrap(),
            hex::encode(Sha256::digest(b""))
        );
    }
}
