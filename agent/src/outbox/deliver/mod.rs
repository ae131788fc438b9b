//! What leaves the device, and on what terms: the push loop's claim and settle, the consent switch,
//! the air-gapped export and the colony keys. The highest room: it uses `write`, `read` (the sent ring)
//! and `record`, and nothing below the handle uses it.
//!
//! - `delivery`: claim a batch, settle every claimed event exactly once.
//! - `consent`: the sync switch and its history; `colony`: the colony secret and the names choice
//!   consented to.
//! - `export`: every pending event into one bundle file.
//!
//! ```text
//! consent → colony; delivery, export, colony: no sibling
//! ```

pub(super) mod colony;
pub(super) mod consent;
pub(super) mod delivery;
pub(super) mod export;
