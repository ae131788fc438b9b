//! Read queries behind the `/v1` read endpoints. Every function takes the tenant explicitly.

pub mod sessions;
pub mod usage;
