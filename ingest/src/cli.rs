//! The command line: `migrate`, `serve`, `tenant create|set`, `token create`, `operator-token create`,
//! `token revoke`, `import`, `device register|revoke|keys`, `retention`, `price add|list|reprice`,
//! `budget create|list`, `alert destination create|list`, `alert rule create|list`,
//! `exports create|list|delete`.
//!
//! Output contract: `tenant create` prints the tenant id alone on the last line of stdout; `token create`
//! and `operator-token create` print `token_id: <uuid>` (what `token revoke --token-id` takes), then the
//! token alone on the last line (once: only its hash is stored); `import` prints a JSON summary on stdout
//! and progress on stderr; `exports create` prints the export as JSON on stderr (with its URL and
//! headers, once) and its id alone on the last line of stdout. Logs go to stderr. Exit code 0 on
//! success, 1 on failure, 2 on bad usage (clap). A reader that closes stdout early (`| head -1`) ends
//! a command quietly with 0 (see `apiary_plumbing::output`).

use std::path::PathBuf;

use anyhow::Context;
use apiary_plumbing::{errln, outln};
use clap::{Parser, Subcommand};

use crate::auth::Scope;
use crate::config::IngestSettings;
use crate::intake::IntakeRules;
use crate::startup::{shutdown_signal, Application};
use crate::store::{self, admin, Store};

#[derive(Debug, Parser)]
#[command(name = "apiary-ingest", version, about = "Apiary cloud ingest")]
pub struct Cli {
    /// TOML config file (else $APIARY_CONFIG); APIARY_* variables and flags override it.
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply the database migrations (on a database with the citus extension, then distribute the
    /// tables by tenant).
    Migrate {
        /// Require Citus: fail, changing nothing, when the database has no citus extension.
        #[arg(long)]
        citus: bool,
    },
    /// Check variables, configuration, database (reachable, migrated) and listen address; one line per
    /// check with the fix; exit status 1 when something is wrong.
    Doctor,
    /// Serve the HTTP API.
    Serve {
        /// Address to listen on, e.g. 127.0.0.1:8080 (port 0: any free port).
        #[arg(long)]
        listen: Option<String>,
    },
    /// Manage tenants.
    Tenant {
        #[command(subcommand)]
        action: TenantAction,
    },
    /// Manage tokens.
    Token {
        #[command(subcommand)]
        action: TokenAction,
    },
    /// Manage operator tokens: the one credential that reads usage across tenants (per tenant and
    /// model only). Revoke them with `token revoke`.
    OperatorToken {
        #[command(subcommand)]
        action: OperatorTokenAction,
    },
    /// Load an agent export bundle (gzip NDJSON with a manifest line). A bundle sealed by a registered
    /// device key is imported as that device and its user; any other is refused unless vouched for
    /// with --trust-unsigned --as-user U --device D.
    Import {
        file: PathBuf,
        /// Tenant id (or unique name) the bundle belongs to.
        #[arg(long)]
        tenant: String,
        /// Import a bundle that is not sealed by an active registered key (unsigned, unknown or revoked
        /// key) on your word, as --as-user and --device. A seal that does not verify is still refused.
        #[arg(long, requires_all = ["as_user", "device"])]
        trust_unsigned: bool,
        /// With --trust-unsigned: the user the bundle's events belong to.
        #[arg(long, requires = "trust_unsigned")]
        as_user: Option<String>,
        /// With --trust-unsigned: the device the bundle comes from (its own device id, if it names one).
        #[arg(long, requires = "trust_unsigned")]
        device: Option<String>,
    },
    /// Manage device signing keys (air-gapped devices' bundles are imported by their key).
    Device {
        #[command(subcommand)]
        action: crate::device_admin::DeviceAction,
    },
    /// Manage a tenant's own model prices (they win over the shipped catalog).
    Price {
        #[command(subcommand)]
        action: PriceAction,
    },
    /// Manage a tenant's budgets (spend or token limits per day, week or month).
    Budget {
        #[command(subcommand)]
        action: BudgetAction,
    },
    /// Manage a tenant's alert destinations and rules.
    Alert {
        #[command(subcommand)]
        action: AlertAction,
    },
    /// Manage a tenant's usage exports (OTLP/HTTP metrics pushes to its collector).
    #[command(visible_alias = "export")]
    Exports {
        #[command(subcommand)]
        action: ExportAction,
    },
    /// Drop event partitions older than the retention window now.
    Retention {
        /// Override retention_days.
        #[arg(long)]
        days: Option<i64>,
    },
}

#[derive(Debug, Subcommand)]
pub enum TenantAction {
    /// Create a tenant; prints its id on the last line.
    Create {
        #[arg(long)]
        name: String,
    },
    /// Change a tenant's settings; prints the settings now in force as JSON (the answer of
    /// GET /v1/tenant/settings).
    Set {
        /// Tenant id (or unique name).
        #[arg(long)]
        tenant: String,
        /// `keys` (colony names never leave a device; the default) or `names` (a device whose user
        /// turns sharing on sends each colony's name beside its key).
        #[arg(long, value_name = "keys|names")]
        colony_names: apiary_schema::colony::ColonyNames,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenAction {
    /// Create a token; prints `token_id: ID` (for `token revoke --token-id`), then the token (once)
    /// alone on the last line.
    Create {
        #[arg(long)]
        tenant: String,
        /// ingest, read or admin; repeat or separate with commas.
        #[arg(long = "scope", required = true, value_delimiter = ',')]
        scopes: Vec<String>,
        #[arg(long)]
        user: Option<String>,
        #[arg(long)]
        device: Option<String>,
    },
    /// Revoke a token (by the id `token create` reported, or by the token itself).
    Revoke {
        #[arg(long, conflicts_with = "token", required_unless_present = "token")]
        token_id: Option<uuid::Uuid>,
        /// The token itself (beware: command lines can end up in shell history).
        #[arg(long)]
        token: Option<String>,
    },
}

// Parsed once per process: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum PriceAction {
    /// Add a price entry (rates in USD per million tokens, as decimals like 3.00); prints it as JSON
    /// and its id on the last line. It prices turns stored from now on; `price reprice` applies it to
    /// turns already stored.
    Add {
        /// Tenant id (or unique name).
        #[arg(long)]
        tenant: String,
        /// Model pattern (`*` matches any run of characters); repeat or separate with commas.
        #[arg(long = "model", required = true, value_delimiter = ',')]
        models: Vec<String>,
        /// Start (included): YYYY-MM-DD (midnight UTC) or RFC 3339.
        #[arg(long)]
        from: String,
        /// End (excluded), same forms.
        #[arg(long)]
        until: Option<String>,
        /// Uncached input.
        #[arg(long)]
        input: String,
        #[arg(long)]
        output: String,
        #[arg(long)]
        cache_read: Option<String>,
        #[arg(long = "cache-write-5m")]
        cache_write_5m: Option<String>,
        #[arg(long = "cache-write-1h")]
        cache_write_1h: Option<String>,
        /// A tier: ABOVE_INPUT_TOKENS:INPUT:OUTPUT[:CACHE_READ[:CACHE_WRITE_5M[:CACHE_WRITE_1H]]]
        /// (empty parts: none); repeatable.
        #[arg(long = "tier")]
        tiers: Vec<String>,
        #[arg(long)]
        source: Option<String>,
        #[arg(long)]
        note: Option<String>,
    },
    /// Print the tenant's entries and the shipped catalog as JSON (the answer of GET /v1/prices).
    List {
        #[arg(long)]
        tenant: String,
    },
    /// Re-price the tenant's turns stored in [from, to) with the prices in force; prints what changed
    /// as JSON (the answer of POST /v1/prices/reprice).
    Reprice {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        from: String,
        #[arg(long)]
        to: String,
    },
}

/// `--tier ABOVE:INPUT:OUTPUT[:CACHE_READ[:CACHE_WRITE_5M[:CACHE_WRITE_1H]]]`.
fn parse_tier(text: &str) -> anyhow::Result<apiary_schema::prices::TierSpec> {
    let parts: Vec<&str> = text.split(':').collect();
    if !(3..=6).contains(&parts.len()) {
        anyhow::bail!("--tier {text:?}: ABOVE_INPUT_TOKENS:INPUT:OUTPUT[:CACHE_READ[:CACHE_WRITE_5M[:CACHE_WRITE_1H]]]");
    }
    let opt = |i: usize| {
        parts
            .get(i)
            .filter(|p| !p.is_empty())
            .map(|p| p.to_string())
    };
    Ok(apiary_schema::prices::TierSpec {
        above_input_tokens: parts[0]
            .parse()
            .with_context(|| format!("--tier {text:?}: the input size is not a number"))?,
        input: parts[1].to_string(),
        output: parts[2].to_string(),
        cache_read: opt(3),
        cache_write_5m: opt(4),
        cache_write_1h: opt(5),
    })
}

async fn price(pool: &sqlx::PgPool, action: PriceAction) -> anyhow::Result<()> {
    use crate::service::prices as api;
    match action {
        PriceAction::Add {
            tenant,
            models,
            from,
            until,
            input,
            output,
            cache_read,
            cache_write_5m,
            cache_write_1h,
            tiers,
            source,
            note,
        } => {
            let tenant_id = admin::resolve_tenant(pool, &tenant).await?;
            let asked = api::NewPrice {
                models,
                from,
                until,
                input,
                output,
                cache_read,
                cache_write_5m,
                cache_write_1h,
                tiers: tiers
                    .iter()
                    .map(|t| parse_tier(t))
                    .collect::<anyhow::Result<_>>()?,
                source,
                note,
            };
            let item = api::add(pool, tenant_id, asked)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            errln!("{}", serde_json::to_string_pretty(&item)?);
            outln!("{}", item.price_id)?;
        }
        PriceAction::List { tenant } => {
            let tenant_id = admin::resolve_tenant(pool, &tenant).await?;
            let list = api::list(pool, tenant_id)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            outln!("{}", serde_json::to_string_pretty(&list)?)?;
        }
        PriceAction::Reprice { tenant, from, to } => {
            let tenant_id = admin::resolve_tenant(pool, &tenant).await?;
            let outcome = api::reprice(pool, tenant_id, &from, &to)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            outln!("{}", serde_json::to_string(&outcome)?)?;
        }
    }
    Ok(())
}

// Parsed once per process: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum BudgetAction {
    /// Create a budget; prints it as JSON on stderr and its id on the last line of stdout.
    Create {
        /// Tenant id (or unique name).
        #[arg(long)]
        tenant: String,
        /// day, week (from Monday) or month.
        #[arg(long)]
        period: String,
        /// IANA zone of the period (default UTC).
        #[arg(long)]
        tz: Option<String>,
        /// Limit in USD (a decimal like 100.00).
        #[arg(
            long,
            conflicts_with = "limit_tokens",
            required_unless_present = "limit_tokens"
        )]
        limit_usd: Option<String>,
        /// Limit in tokens (input + output).
        #[arg(long)]
        limit_tokens: Option<u64>,
        /// Percentages to notify at (default 50,80,100).
        #[arg(long, value_delimiter = ',')]
        thresholds: Option<Vec<u32>>,
        /// Only this user's usage.
        #[arg(long)]
        user: Option<String>,
        /// Only this model's usage.
        #[arg(long)]
        model: Option<String>,
        /// Only this colony's usage (a colony key).
        #[arg(long)]
        colony: Option<String>,
        #[arg(long)]
        name: Option<String>,
    },
    /// Print the tenant's budgets with their current periods as JSON (the answer of GET /v1/budgets).
    List {
        #[arg(long)]
        tenant: String,
    },
}

async fn budget(
    pool: &sqlx::PgPool,
    settings: &IngestSettings,
    action: BudgetAction,
) -> anyhow::Result<()> {
    use crate::service::budgets as api;
    let db = crate::query::ReadDb::new(pool.clone(), crate::status::rules(settings));
    match action {
        BudgetAction::Create {
            tenant,
            period,
            tz,
            limit_usd,
            limit_tokens,
            thresholds,
            user,
            model,
            colony,
            name,
        } => {
            let tenant_id = admin::resolve_tenant(pool, &tenant).await?;
            let asked = api::NewBudget {
                name,
                scope: Some(api::ScopeBody {
                    tenant: None,
                    user,
                    model,
                    colony,
                }),
                period,
                tz,
                limit_usd: limit_usd.map(serde_json::Value::String),
                limit_tokens,
                thresholds,
            };
            let b = api::create(pool, &db, tenant_id, asked)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            errln!("{}", serde_json::to_string_pretty(&b)?);
            outln!("{}", b.budget_id)?;
        }
        BudgetAction::List { tenant } => {
            let tenant_id = admin::resolve_tenant(pool, &tenant).await?;
            let list = api::list(pool, &db, tenant_id, None)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            outln!("{}", serde_json::to_string_pretty(&list)?)?;
        }
    }
    Ok(())
}

#[derive(Debug, Subcommand)]
pub enum AlertAction {
    /// Alert destinations (webhooks, Slack).
    Destination {
        #[command(subcommand)]
        action: DestinationAction,
    },
    /// Alert rules.
    Rule {
        #[command(subcommand)]
        action: RuleAction,
    },
}

#[derive(Debug, Subcommand)]
pub enum DestinationAction {
    /// Add a destination; prints it as JSON on stderr (with the webhook secret when one was made: keep
    /// it) and its id on the last line of stdout.
    Create {
        #[arg(long)]
        tenant: String,
        /// webhook or slack.
        #[arg(long)]
        kind: String,
        #[arg(long)]
        url: String,
        /// The webhook's signing secret (16 to 200 characters); absent: one is made.
        #[arg(long)]
        secret: Option<String>,
        #[arg(long)]
        name: Option<String>,
    },
    /// Print the tenant's destinations as JSON: host and URL fingerprint, never the URL nor the secret.
    List {
        #[arg(long)]
        tenant: String,
    },
}

#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum RuleAction {
    /// Add a rule; prints it as JSON on stderr and its id on the last line of stdout.
    Create {
        #[arg(long)]
        tenant: String,
        /// budget, session_status, device_offline or silence.
        #[arg(long)]
        kind: String,
        #[arg(long)]
        destination: String,
        #[arg(long)]
        name: Option<String>,
        /// budget: this budget only.
        #[arg(long)]
        budget: Option<String>,
        /// session_status: statuses, comma-separated (e.g. stalled,failed,crashed).
        #[arg(long, value_delimiter = ',')]
        statuses: Option<Vec<String>>,
        /// session_status: seconds a session must stay in the status.
        #[arg(long)]
        min_duration_secs: Option<i64>,
        /// device_offline: also fire at this backlog (events).
        #[arg(long)]
        backlog_events: Option<i64>,
        /// silence: hours without a word (default 24).
        #[arg(long)]
        silence_hours: Option<i64>,
    },
    /// Print the tenant's rules as JSON.
    List {
        #[arg(long)]
        tenant: String,
    },
}

async fn alert(
    pool: &sqlx::PgPool,
    settings: &IngestSettings,
    action: AlertAction,
) -> anyhow::Result<()> {
    use crate::service::alerts as api;
    let fail = |e: crate::error::ApiError| anyhow::anyhow!("{e}");
    match action {
        AlertAction::Destination {
            action:
                DestinationAction::Create {
                    tenant,
                    kind,
                    url,
                    secret,
                    name,
                },
        } => {
            let tenant_id = admin::resolve_tenant(pool, &tenant).await?;
            let allowed = settings.alerts.allow_private_destinations;
            let hint = private_destination_hint(&kind, &url, allowed);
            let asked = api::NewDestination {
                kind,
                url,
                secret,
                name,
            };
            let d = api::create_destination(pool, tenant_id, asked, allowed)
                .await
                .map_err(|e| match hint {
                    Some(hint) => anyhow::anyhow!("{e}; {hint}"),
                    None => fail(e),
                })?;
            errln!("{}", serde_json::to_string_pretty(&d)?);
            outln!("{}", d.destination.destination_id)?;
        }
        AlertAction::Destination {
            action: DestinationAction::List { tenant },
        } => {
            let tenant_id = admin::resolve_tenant(pool, &tenant).await?;
            let list = api::destinations(pool, tenant_id).await.map_err(fail)?;
            outln!("{}", serde_json::to_string_pretty(&list)?)?;
        }
        AlertAction::Rule {
            action:
                RuleAction::Create {
                    tenant,
                    kind,
                    destination,
                    name,
                    budget,
                    statuses,
                    min_duration_secs,
                    backlog_events,
                    silence_hours,
                },
        } => {
            let tenant_id = admin::resolve_tenant(pool, &tenant).await?;
            // The flags as the API's body, so both refuse the same rules with the same words.
            let mut body = serde_json::Map::new();
            body.insert("kind".into(), kind.into());
            body.insert("destination_id".into(), destination.into());
            let fields = [
                ("name", name.map(serde_json::Value::from)),
                ("budget_id", budget.map(serde_json::Value::from)),
                ("statuses", statuses.map(serde_json::Value::from)),
                (
                    "min_duration_secs",
                    min_duration_secs.map(serde_json::Value::from),
                ),
                (
                    "backlog_events",
                    backlog_events.map(serde_json::Value::from),
                ),
                ("silence_hours", silence_hours.map(serde_json::Value::from)),
            ];
            for (field, value) in fields {
                if let Some(v) = value {
                    body.insert(field.into(), v);
                }
            }
            let asked = api::NewRule::parse(body.into()).map_err(fail)?;
            let r = api::create_rule(pool, tenant_id, asked)
                .await
                .map_err(fail)?;
            errln!("{}", serde_json::to_string_pretty(&r)?);
            outln!("{}", r.rule_id)?;
        }
        AlertAction::Rule {
            action: RuleAction::List { tenant },
        } => {
            let tenant_id = admin::resolve_tenant(pool, &tenant).await?;
            let list = api::rules(pool, tenant_id).await.map_err(fail)?;
            outln!("{}", serde_json::to_string_pretty(&list)?)?;
        }
    }
    Ok(())
}

/// When only `alerts.allow_private_destinations` stands between `url` and a destination, how to give
/// the setting to this command: it reads its own configuration, as `serve` does (a server started with
/// the variable in its own environment does not lend it to the command line).
fn private_destination_hint(kind: &str, url: &str, allowed: bool) -> Option<&'static str> {
    use crate::alerts::destination::{check_url, Kind};
    let kind = Kind::parse(kind)?;
    let private_only = !allowed
        && check_url(kind, url.trim(), false).is_err()
        && check_url(kind, url.trim(), true).is_ok();
    private_only.then_some(
        "this command reads alerts.allow_private_destinations from its own configuration, as `serve` \
         does: give it the server's config file (--config FILE, or APIARY_CONFIG=FILE) or \
         APIARY_ALERTS_ALLOW_PRIVATE_DESTINATIONS=true",
    )
}

#[derive(Debug, Subcommand)]
pub enum ExportAction {
    /// Add an export; prints it as JSON on stderr, with its URL and headers (shown this once: keep
    /// them), and its id on the last line of stdout.
    Create {
        #[arg(long)]
        tenant: String,
        /// The OTLP/HTTP metrics endpoint, e.g. https://otlp.example.com/v1/metrics.
        #[arg(long)]
        url: String,
        /// A request header as NAME=VALUE (e.g. api-key=…); repeatable.
        #[arg(long = "header", value_name = "NAME=VALUE")]
        headers: Vec<String>,
        /// Seconds between sends (5 to 86400, default 60).
        #[arg(long)]
        interval_secs: Option<i32>,
        /// Attributes of every point, comma-separated: user, model, colony, runtime, device.
        #[arg(long, value_delimiter = ',')]
        dimensions: Vec<String>,
    },
    /// Print the tenant's exports as JSON: host, URL fingerprint and send status, never the headers.
    List {
        #[arg(long)]
        tenant: String,
    },
    /// Delete an export: nothing more is sent.
    Delete {
        #[arg(long)]
        tenant: String,
        /// The export's id (`ex_…`).
        export_id: String,
    },
}

async fn exports(
    pool: &sqlx::PgPool,
    settings: &IngestSettings,
    action: ExportAction,
) -> anyhow::Result<()> {
    use crate::exports::store;
    let fail = |e: crate::error::ApiError| anyhow::anyhow!("{e}");
    match action {
        ExportAction::Create {
            tenant,
            url,
            headers,
            interval_secs,
            dimensions,
        } => {
            let tenant_id = admin::resolve_tenant(pool, &tenant).await?;
            let headers = headers
                .iter()
                .map(|h| {
                    h.split_once('=')
                        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
                        .with_context(|| format!("--header {h:?}: give NAME=VALUE"))
                })
                .collect::<anyhow::Result<_>>()?;
            let allowed = settings.alerts.allow_private_destinations;
            let hint = private_destination_hint("webhook", &url, allowed);
            let asked = store::NewExport {
                url,
                headers,
                interval_secs,
                dimensions,
            };
            let created = store::create(pool, tenant_id, asked, allowed)
                .await
                .map_err(|e| match hint {
                    Some(hint) => anyhow::anyhow!("{e}; {hint}"),
                    None => fail(e),
                })?;
            errln!("{}", serde_json::to_string_pretty(&created)?);
            errln!("the URL and headers are shown this once: keep them");
            outln!("{}", created.export.export_id)?;
        }
        ExportAction::List { tenant } => {
            let tenant_id = admin::resolve_tenant(pool, &tenant).await?;
            let list = store::list(pool, tenant_id).await.map_err(fail)?;
            outln!("{}", serde_json::to_string_pretty(&list)?)?;
        }
        ExportAction::Delete { tenant, export_id } => {
            let tenant_id = admin::resolve_tenant(pool, &tenant).await?;
            store::delete(pool, tenant_id, &export_id)
                .await
                .map_err(fail)?;
            outln!("deleted {export_id}")?;
        }
    }
    Ok(())
}

#[derive(Debug, Subcommand)]
pub enum OperatorTokenAction {
    /// Create an operator token; prints `token_id: ID` (for `token revoke --token-id`), then the token
    /// (once) alone on the last line.
    Create {
        /// What the token is for (e.g. billing), kept for audit.
        #[arg(long)]
        label: String,
    },
}

/// Loads the settings (defaults → file → env) and applies the flags.
pub fn settings(cli: &Cli) -> anyhow::Result<IngestSettings> {
    let mut s = IngestSettings::load(cli.config.as_deref())?;
    if let Command::Serve { listen: Some(l) } = &cli.command {
        s.listen = l.clone();
    }
    if let Command::Retention { days: Some(d) } = &cli.command {
        s.retention_days = *d;
    }
    s.validate()?;
    Ok(s)
}

/// Before a command touches the database: can it be reached, and (but for `migrate`) is it migrated?
/// Fails with the server's address and the next step. `serve` only warns: it starts without the
/// database and reports readiness on `/readyz`.
async fn preflight(command: &Command, pool: &sqlx::PgPool, url: &str) -> anyhow::Result<()> {
    let problem = match store::diagnose_connection(url, std::time::Duration::from_secs(5)).await {
        Err(problem) => Some(problem),
        Ok(()) if matches!(command, Command::Migrate { .. }) => None,
        Ok(()) => store::schema_state(pool)
            .await
            .context("read the schema version")?
            .problem(),
    };
    match problem {
        None => Ok(()),
        Some(p) if matches!(command, Command::Serve { .. }) => {
            tracing::warn!("{p}; serving anyway (/readyz answers 503 until it is fixed)");
            Ok(())
        }
        Some(p) => anyhow::bail!(p),
    }
}

/// Runs the command.
pub async fn run(cli: Cli, settings: IngestSettings) -> anyhow::Result<()> {
    let url = settings.database_url()?;
    if matches!(cli.command, Command::Migrate { .. }) {
        let timeout = std::time::Duration::from_secs(5);
        if store::create_database_if_missing(url, timeout)
            .await
            .map_err(|e| anyhow::anyhow!(e))?
        {
            errln!("created the database named in DATABASE_URL");
        }
    }
    let pool = Store::connect_lazy(url, settings.pool_size)?;
    preflight(&cli.command, &pool, url).await?;
    match cli.command {
        Command::Doctor => unreachable!("main runs doctor before loading settings"),
        Command::Migrate { citus } => {
            store::migrate_with(&pool, citus).await.context("migrate")?;
            errln!("migrations applied");
        }
        Command::Serve { .. } => {
            let app = Application::build(settings, pool.clone()).await?;
            tracing::info!(address = %app.address(), port = app.port(), "listening");
            app.run_until_stopped(shutdown_signal()).await?;
        }
        Command::Tenant {
            action: TenantAction::Create { name },
        } => {
            let id = admin::create_tenant(&pool, &name).await?;
            outln!("{id}")?;
        }
        Command::Tenant {
            action:
                TenantAction::Set {
                    tenant,
                    colony_names,
                },
        } => {
            let tenant_id = admin::resolve_tenant(&pool, &tenant).await?;
            let s = admin::set_colony_names(&pool, tenant_id, colony_names).await?;
            outln!("{}", serde_json::json!({ "colony_names": s.colony_names }))?;
        }
        Command::Token {
            action:
                TokenAction::Create {
                    tenant,
                    scopes,
                    user,
                    device,
                },
        } => {
            let scopes = scopes
                .iter()
                .map(|s| {
                    Scope::parse(s.trim())
                        .with_context(|| format!("unknown scope {s:?} (ingest, read, admin)"))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let spec = admin::TokenSpec {
                tenant,
                scopes,
                user_id: user,
                device_id: device,
            };
            let (id, token) = admin::create_token(&pool, &spec).await?;
            errln!("token {id} created; it is shown once, store it now");
            outln!("token_id: {id}")?;
            outln!("{token}")?;
        }
        Command::OperatorToken {
            action: OperatorTokenAction::Create { label },
        } => {
            let (id, token) = admin::create_operator_token(&pool, &label).await?;
            errln!(
                "operator token {id} created: it reads usage of EVERY tenant (per tenant and model); \
                 it is shown once, store it now"
            );
            outln!("token_id: {id}")?;
            outln!("{token}")?;
        }
        Command::Token {
            action: TokenAction::Revoke { token_id, token },
        } => {
            let which = match (token_id, token) {
                (Some(id), _) => admin::TokenRef::Id(id),
                (None, Some(t)) => admin::TokenRef::Token(t),
                (None, None) => anyhow::bail!("give --token-id or --token"),
            };
            match admin::revoke_token(&pool, &which).await? {
                Some(id) => outln!("revoked {id}")?,
                None => anyhow::bail!("no such token"),
            }
        }
        Command::Import {
            file,
            tenant,
            trust_unsigned: _,
            as_user,
            device,
        } => {
            let tenant_id = admin::resolve_tenant(&pool, &tenant).await?;
            let store = Store::new(pool.clone()).with_status_rules(crate::status::rules(&settings));
            let rules = IntakeRules::from_settings(&settings);
            let trust = match (as_user, device) {
                (Some(user_id), Some(device_id)) => {
                    for (what, id) in [("--as-user", &user_id), ("--device", &device_id)] {
                        anyhow::ensure!(
                            apiary_schema::policy::is_id(id),
                            "{what} {id:?} is not a valid id"
                        );
                    }
                    crate::import::Trust::Unsigned { user_id, device_id }
                }
                _ => crate::import::Trust::Sealed,
            };
            let summary = crate::import::run(&store, &rules, tenant_id, &file, &trust).await?;
            outln!("{}", serde_json::to_string(&summary)?)?;
        }
        Command::Device { action } => crate::device_admin::run(&pool, action).await?,
        Command::Price { action } => price(&pool, action).await?,
        Command::Budget { action } => budget(&pool, &settings, action).await?,
        Command::Alert { action } => alert(&pool, &settings, action).await?,
        Command::Exports { action } => exports(&pool, &settings, action).await?,
        Command::Retention { .. } => {
            let store = Store::new(pool.clone());
            let cutoff = IntakeRules::from_settings(&settings)
                .oldest_accepted(chrono::Utc::now())
                .date_naive();
            let n = store.drop_before(cutoff).await?;
            outln!("dropped {n} partitions before {cutoff}")?;
        }
    }
    pool.close().await;
    Ok(())
}
