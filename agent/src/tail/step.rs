//! One blocking step on one file: decide what the file's state calls for (drain a replaced file, restart,
//! read the next chunk, or nothing) and, for a chunk, read and process its lines. The caller commits what
//! a step returns and only then adopts its new state.

use std::fs::File;
use std::io;
use std::sync::Arc;

use super::discover::Source;
use super::file::{self, FileMeta, Limits, SkipHint};
use super::lines::{process_line, LineContext};
use super::sink::{Checkpoint, TailItem};
use super::TailSettings;

/// Upper bound on the bytes of lines in one chunk (besides `batch_lines`), to bound memory.
const MAX_CHUNK_BYTES: u64 = 16 << 20;

/// An open file and the identity it had when opened.
#[derive(Debug, Clone)]
pub struct Handle {
    pub file: Arc<File>,
    pub id: String,
}

/// What one step starts from: the file's committed state.
#[derive(Debug)]
pub struct Job {
    pub source: Source,
    pub checkpoint: Checkpoint,
    /// Lines before `checkpoint.offset`; `None` when not counted yet (after a restart of the agent).
    pub line_no: Option<u64>,
    pub handle: Option<Handle>,
    pub hint: Option<SkipHint>,
}

/// Why reading restarts from offset 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    /// A different file (`dev:inode`) now lives at the path.
    Replaced,
    /// The file is shorter than the committed offset.
    Truncated,
    /// The file's first bytes no longer hash to the committed head hash.
    Rewritten,
}

/// What the caller should do.
#[derive(Debug)]
pub enum Step {
    /// Nothing to commit. `seen` is the file's metadata when it was found caught up (or waiting on a partial
    /// line): until it changes, the file need not be looked at again.
    Idle {
        handle: Option<Handle>,
        seen: Option<FileMeta>,
        hint: Option<SkipHint>,
    },
    /// There is no file at the path any more, and nothing left to drain.
    Gone,
    /// Commit no items with this checkpoint (offset 0), then read again.
    Restart {
        why: Restart,
        checkpoint: Checkpoint,
        handle: Handle,
    },
    /// Commit these items with this checkpoint.
    Chunk {
        items: Vec<TailItem>,
        lines: u64,
        checkpoint: Checkpoint,
        line_no: u64,
        handle: Handle,
        hint: Option<SkipHint>,
        /// Set when the read reached the end of the file: nothing more until this changes.
        seen: Option<FileMeta>,
    },
}

/// Runs one step. Blocking.
pub fn next_step(job: Job, settings: &TailSettings) -> io::Result<Step> {
    let Job {
        source,
        mut checkpoint,
        line_no,
        handle,
        hint,
    } = job;
    checkpoint.path = source.path.to_string_lossy().into_owned();
    let at_path = file::stat(&source.path)?;
    let handle = match handle {
        Some(h) if at_path.as_ref().is_some_and(|m| m.id == h.id) => Some(h),
        // Renamed away, replaced or deleted while open: first read what is left in the old file.
        Some(old) if old.id == checkpoint.file_id => {
            let mut step = read_chunk(&source, checkpoint.clone(), line_no, old, hint, settings)?;
            if let Step::Chunk { seen, .. } = &mut step {
                // Caught up with the old file says nothing about the file now at the path.
                *seen = None;
                return Ok(step);
            }
            None
        }
        _ => None,
    };
    if at_path.is_none() && handle.is_none() {
        return Ok(Step::Gone);
    }
    let handle = match handle {
        Some(h) => h,
        None => match File::open(&source.path) {
            Ok(f) => {
                let id = FileMeta::of(&f)?.id;
                Handle {
                    file: Arc::new(f),
                    id,
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Step::Gone),
            Err(e) => return Err(e),
        },
    };
    if handle.id != checkpoint.file_id {
        if checkpoint.offset > 0 {
            return Ok(restart(Restart::Replaced, checkpoint, handle));
        }
        // Nothing read from any file here yet: adopt this one.
        checkpoint.file_id = handle.id.clone();
    }
    read_chunk(&source, checkpoint, line_no, handle, hint, settings)
}

fn restart(why: Restart, mut checkpoint: Checkpoint, handle: Handle) -> Step {
    checkpoint.file_id = handle.id.clone();
    checkpoint.offset = 0;
    checkpoint.head_hash = super::empty_head_hash();
    Step::Restart {
        why,
        checkpoint,
        handle,
    }
}

/// Verifies the file still holds what was committed, then reads and processes the next chunk.
fn read_chunk(
    source: &Source,
    mut checkpoint: Checkpoint,
    line_no: Option<u64>,
    handle: Handle,
    hint: Option<SkipHint>,
    settings: &TailSettings,
) -> io::Result<Step> {
    let file = &handle.file;
    let meta = FileMeta::of(file)?;
    let start = checkpoint.offset;
    if meta.len < start {
        return Ok(restart(Restart::Truncated, checkpoint, handle));
    }
    if start > 0 && file::head_hash(file, start)? != checkpoint.head_hash {
        return Ok(restart(Restart::Rewritten, checkpoint, handle));
    }
    let idle = |handle, hint| Step::Idle {
        handle: Some(handle),
        seen: Some(meta.clone()),
        hint,
    };
    if meta.len == start {
        return Ok(idle(handle, None));
    }
    let limits = Limits {
        max_line_bytes: settings.max_line_bytes,
        max_lines: settings.batch_lines,
        max_bytes: MAX_CHUNK_BYTES,
    };
    let read = file::read_lines(file, start, &limits, hint)?;
    if read.lines.is_empty() {
        return Ok(idle(handle, read.skip_hint));
    }
    let mut line_no = match line_no {
        Some(n) => n,
        None => file::count_lines(file, start)?,
    };
    let colony_keyer = settings.colony.as_ref().map(|k| k.keyer());
    let ctx = LineContext {
        source_key: &source.key,
        file_id: &handle.id,
        session_hint: source.session_hint.as_deref(),
        policy: &settings.policy,
        zone: settings.zone,
        max_line_bytes: settings.max_line_bytes,
        colony: colony_keyer.as_ref(),
    };
    let mut items = Vec::with_capacity(read.lines.len());
    for line in &read.lines {
        line_no += 1;
        items.extend(process_line(line, line_no, &ctx));
    }
    checkpoint.offset = read.end;
    if start < file::HEAD_BYTES {
        checkpoint.head_hash = file::head_hash(file, read.end)?;
    }
    Ok(Step::Chunk {
        items,
        lines: read.lines.len() as u64,
        checkpoint,
        line_no,
        hint: read.skip_hint,
        seen: read.at_eof.then_some(meta),
        handle,
    })
}
