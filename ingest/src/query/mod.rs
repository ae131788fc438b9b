//! Read queries behind the `/v1` read endpoints. Every function takes the tenant explicitly, and the
//! user a user-bound `read` token is limited to ([`crate::auth::Principal::read_user`]).

pub mod buckets;
pub mod sessions;
pub mod sums;
pub mod usage;
