//! What both command lines print, written so they behave like Unix tools in a pipeline.
//!
//! `println!` panics when it cannot write ("failed printing to stdout: Broken pipe"), which is what
//! happens to `apiary-ingest budget list | head -1` once `head` has read its line and gone. The
//! classic answer, the default `SIGPIPE` disposition (the kernel ends the process at the failed
//! write), is not used: it would also end `apiary-agent run` and `apiary-ingest serve` whenever any pipe
//! or socket they write closes (a log pipe whose reader restarted, a Unix-socket peer), in the middle of
//! a commit, and it does not exist on Windows; it would also need `unsafe` (`libc::signal`). Instead every
//! line a command prints goes through this module:
//!
//! - [`outln!`](crate::outln) / [`out!`](crate::out) write to standard output and answer
//!   [`OutputError`]; a reader that went away is [`OutputError::Closed`], any other failure (a full disk
//!   behind `> file`) is [`OutputError::Write`] and stays an error.
//! - [`Stdout`] is the same as an `io::Write`, for code that writes through a generic writer; a closed
//!   pipe comes out of it as an `io::Error` (kind `BrokenPipe`) carrying [`OutputError::Closed`].
//! - [`errln!`](crate::errln) writes a line to standard error and drops it when standard error is gone
//!   (nowhere is left to report anything).
//! - The binaries' `main` asks [`is_closed`] of the error a command ended with: a closed standard output
//!   ends the process quietly with status 0 (the reader had what it wanted, as with `ripgrep`); any other
//!   error is printed as usual. Only standard output's own closing counts: a broken pipe from anywhere
//!   else (the network) is still an error.
//!
//! Each `outln!` flushes, so a line is out before the command goes on (a listing piped to `head -1` ends
//! as soon as `head` leaves, not when the listing is complete).

use std::fmt;
use std::io::{self, Write};

/// Why a line could not be printed.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// Standard output's reader closed it (`| head -1` after its line): not a failure of the command.
    #[error("standard output was closed by its reader")]
    Closed,
    /// Standard output could not be written (a full disk, a revoked terminal).
    #[error("cannot write to standard output: {0}")]
    Write(#[source] io::Error),
}

impl OutputError {
    fn from_io(e: io::Error) -> OutputError {
        if e.kind() == io::ErrorKind::BrokenPipe {
            OutputError::Closed
        } else {
            OutputError::Write(e)
        }
    }
}

/// Writes `args` to standard output and flushes it.
pub fn print(args: fmt::Arguments<'_>) -> Result<(), OutputError> {
    let mut out = io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| out.flush())
        .map_err(OutputError::from_io)
}

/// Writes `args` and a newline to standard output and flushes it.
pub fn print_line(args: fmt::Arguments<'_>) -> Result<(), OutputError> {
    let mut out = io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .map_err(OutputError::from_io)
}

/// Writes `args` and a newline to standard error; dropped when standard error cannot be written.
pub fn print_error_line(args: fmt::Arguments<'_>) {
    let mut err = io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| err.write_all(b"\n"));
}

/// Standard output (locked, line-buffered) as an `io::Write` whose closed pipe is recognisable by
/// [`is_closed`].
#[derive(Debug)]
pub struct Stdout(io::StdoutLock<'static>);

impl Stdout {
    /// Locks standard output for this writer's lifetime.
    pub fn lock() -> Stdout {
        Stdout(io::stdout().lock())
    }

    fn wrap(e: io::Error) -> io::Error {
        if e.kind() == io::ErrorKind::BrokenPipe {
            io::Error::new(io::ErrorKind::BrokenPipe, OutputError::Closed)
        } else {
            e
        }
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf).map_err(Stdout::wrap)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.write_all(buf).map_err(Stdout::wrap)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush().map_err(Stdout::wrap)
    }
}

/// Whether `error`, or one of its causes, is standard output closed by its reader ([`OutputError::Closed`],
/// directly or inside an `io::Error` from [`Stdout`]).
pub fn is_closed(error: &(dyn std::error::Error + 'static)) -> bool {
    let closed = |e: &(dyn std::error::Error + 'static)| {
        matches!(e.downcast_ref::<OutputError>(), Some(OutputError::Closed))
            || e.downcast_ref::<io::Error>()
                .and_then(io::Error::get_ref)
                .and_then(|inner| inner.downcast_ref::<OutputError>())
                .is_some_and(|o| matches!(o, OutputError::Closed))
    };
    std::iter::successors(Some(error), |e| e.source()).any(closed)
}

/// `println!` for command output: answers `Result<(), OutputError>` instead of panicking (see
/// [`crate::output`]).
#[macro_export]
macro_rules! outln {
    () => {
        $crate::output::print_line(::std::format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::print_line(::std::format_args!($($arg)*))
    };
}

/// `print!` for command output: answers `Result<(), OutputError>` instead of panicking (see
/// [`crate::output`]).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::print(::std::format_args!($($arg)*))
    };
}

/// `eprintln!` that never panics: a line standard error cannot take is dropped (see [`crate::output`]).
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::print_error_line(::std::format_args!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("listing the budgets")]
    struct Listing(#[source] OutputError);

    #[test]
    fn a_closed_standard_output_is_recognised_through_its_causes() {
        assert!(is_closed(&OutputError::Closed));
        assert!(is_closed(&Listing(OutputError::Closed)));
        let through_writer = Stdout::wrap(io::Error::from(io::ErrorKind::BrokenPipe));
        assert_eq!(through_writer.kind(), io::ErrorKind::BrokenPipe);
        assert!(is_closed(&through_writer));
        let wrapped = io::Error::other(Listing(OutputError::Closed));
        assert!(is_closed(&wrapped));
    }

    #[test]
    fn other_failures_and_other_broken_pipes_stay_errors() {
        // A full disk behind `> file`.
        let full = OutputError::from_io(io::Error::from(io::ErrorKind::StorageFull));
        assert!(matches!(full, OutputError::Write(_)));
        assert!(!is_closed(&full));
        // A broken pipe from a socket, not from standard output.
        assert!(!is_closed(&io::Error::from(io::ErrorKind::BrokenPipe)));
        assert!(matches!(
            OutputError::from_io(io::Error::from(io::ErrorKind::BrokenPipe)),
            OutputError::Closed
        ));
    }
}
