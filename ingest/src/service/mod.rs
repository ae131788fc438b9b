//! The operations the HTTP routes and the command line share: prices ([`prices`]), budgets
//! ([`budgets`]) and alerts ([`alerts`]).
//!
//! Layers: [`crate::routes`] and [`crate::cli`] call these; these call [`crate::store`] (and the read
//! side, [`crate::query`]); nothing here names a route or the command line. Each operation takes the
//! pool (and what else it reads) and a typed input, checks it, and answers a typed result or the one
//! [`crate::error::ApiError`], so both ways in refuse the same input with the same words.
//!
//! Authorization is the caller's: a route checks its token's scope (and a read token's user) before it
//! calls in; the command line runs as the operator. A function here never sees a token.

pub mod alerts;
pub mod budgets;
pub mod prices;
