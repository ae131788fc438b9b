//! The application state every request can reach, and the parts of it each extractor and handler takes.
//!
//! [`AppState`] is built once at start-up and cloned per request (every field is a pool handle or an
//! `Arc`). Nothing reaches into it by field from the outside of this module's users: an extractor or a
//! handler takes the *part* it needs through [`FromRef`] — authentication takes [`AuthState`], the read
//! handlers take [`ReadDb`] (the pool sealed inside the read queries), readiness takes the pool, the
//! metrics route takes [`Metrics`] — so a new route shows in its signature what it may touch, and the
//! extractors are generic over any state that can yield their part (a test can build a router on a
//! state of its own).
//!
//! The parts' types live with their owners ([`crate::auth`], [`crate::query`]); this module only wires
//! them together, which keeps the import graph one-way: `state` depends on them, never the reverse.

use std::sync::Arc;
use std::time::Duration;

use apiary_schema::Policy;
use axum::extract::FromRef;
use sqlx::PgPool;

use crate::auth::{AuthState, TokenGuard};
use crate::auth_guard::AuthGuard;
use crate::budget_watch::BudgetWatch;
use crate::cadence::Cadence;
use crate::config::IngestSettings;
use crate::group_commit::GroupCommit;
use crate::intake::IntakeRules;
use crate::metrics::Metrics;
use crate::query::ReadDb;
use crate::store::Store;
use crate::stream::StreamHub;

/// What every handler can reach. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// The Postgres pool (also inside `store` and `reads`).
    pub pool: PgPool,
    /// The write side: batches, partitions, retention.
    pub store: Arc<Store>,
    /// The settings the process started with.
    pub settings: Arc<IngestSettings>,
    /// Verified-token cache and per-token rate limits.
    pub tokens: Arc<TokenGuard>,
    /// Failed-authentication throttle per client address and negative token cache.
    pub auth_guard: Arc<AuthGuard>,
    /// The process's Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// The server-side allowlist, re-applied to every event: the shipped default with colony names (a
    /// tenant that did not choose `names` loses them before the check, see `crate::intake`).
    pub policy: Arc<Policy>,
    /// Intake limits and the accepted time window.
    pub rules: Arc<IntakeRules>,
    /// The read side: the pool behind the read queries, and the health model's thresholds.
    pub reads: ReadDb,
    /// The live stream's reader and fan-out on this replica (`GET /v1/stream`).
    pub stream: Arc<StreamHub>,
    /// Tenants whose budgets to evaluate, and recent quotas ([`crate::budgets`]).
    pub budgets: Arc<BudgetWatch>,
    /// The batch writers' queue when `group_commit` is on; None writes each request's batch itself.
    pub group_commit: Option<GroupCommit>,
    /// The push cadence asked of the agents, and the bound on batches in flight.
    pub cadence: Arc<Cadence>,
}

impl AppState {
    pub fn new(settings: IngestSettings, pool: PgPool) -> AppState {
        let tokens = TokenGuard::new(
            Duration::from_secs(settings.token_cache_secs),
            settings.rate_limit_per_sec,
            settings.rate_limit_burst,
        );
        let auth_guard = AuthGuard::new(
            settings.auth_failures_per_sec,
            settings.auth_failure_burst,
            Duration::from_secs(settings.token_cache_secs),
        );
        let status_rules = crate::status::rules(&settings);
        let stream = Arc::new(StreamHub::new(
            settings.stream_max_subscribers,
            settings.stream_max_per_tenant,
        ));
        let store = Arc::new(Store::new(pool.clone()).with_status_rules(status_rules));
        let group_commit = settings
            .group_commit
            .then(|| GroupCommit::start(store.clone(), &settings));
        let cadence = Arc::new(Cadence::new(&settings));
        let metrics = Arc::new(Metrics::with_cadence(cadence.clone()));
        AppState {
            cadence,
            auth_guard: Arc::new(auth_guard),
            store,
            group_commit,
            reads: ReadDb::new(pool.clone(), status_rules),
            pool,
            rules: Arc::new(IntakeRules::from_settings(&settings)),
            settings: Arc::new(settings),
            tokens: Arc::new(tokens),
            metrics,
            policy: Arc::new(Policy::default_policy().with_colony_names()),
            stream,
            budgets: Arc::new(BudgetWatch::new()),
        }
    }

    /// The health model's thresholds (the same the batches fold with).
    pub fn status_rules(&self) -> &apiary_schema::status::Rules {
        &self.store.status_rules
    }
}

impl FromRef<AppState> for AuthState {
    fn from_ref(s: &AppState) -> AuthState {
        AuthState {
            pool: s.pool.clone(),
            tokens: s.tokens.clone(),
            guard: s.auth_guard.clone(),
            metrics: s.metrics.clone(),
        }
    }
}

impl FromRef<AppState> for ReadDb {
    fn from_ref(s: &AppState) -> ReadDb {
        s.reads.clone()
    }
}

impl FromRef<AppState> for PgPool {
    fn from_ref(s: &AppState) -> PgPool {
        s.pool.clone()
    }
}

impl FromRef<AppState> for Arc<StreamHub> {
    fn from_ref(s: &AppState) -> Arc<StreamHub> {
        s.stream.clone()
    }
}

impl FromRef<AppState> for Arc<Metrics> {
    fn from_ref(s: &AppState) -> Arc<Metrics> {
        s.metrics.clone()
    }
}
