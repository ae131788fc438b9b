//! Read queries behind the `/v1` read endpoints. Every function takes a typed read scope
//! ([`crate::access::TenantRead`], or for usage across tenants an [`crate::access::OperatorRead`]) instead
//! of a raw tenant id, so no query can be called without the tenant (and user) filter the token allows.

pub mod buckets;
pub mod history;
pub mod sessions;
pub mod sums;
pub mod usage;
