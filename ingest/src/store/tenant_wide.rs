//! The rollup rows that sum every user of a tenant — `usage_rollups_colony_daily` and `_monthly`
//! ([`crate::rollups::ColonyRows`]) and `tool_rollups_tenant_hourly`, `_daily` and `_monthly`
//! ([`crate::tool_rollups::TenantToolRows`]) — written by one statement, the last of a group's
//! transaction ([`super::batch`]).
//!
//! Group commit keeps the batches of concurrent groups apart by session and device, so their rows keyed
//! by session or device never meet; these do: every group with usage of a tenant adds to its day of a
//! model and of a tool. A row lock is held until the commit, so a transaction that took them in the
//! middle of its work made every concurrent transaction of the tenant wait for the rest of it (the
//! devices, the live stream's rows, the commit): at 2,000 devices in the fleet bench a third of the
//! ingest's statements in flight were waiting on them. Taken last, they are held only for the commit. The statement locks the five
//! tables' rows in one order (colony days, colony months, tool hours, days, months; each in key
//! order), the same in every transaction.

use std::sync::LazyLock;

use sqlx::{Postgres, Transaction};

use crate::rollups::{self, ColonyRows, COLONY_PARAMS};
use crate::tool_rollups::{self, TenantToolRows};

/// The colony upserts (parameters from 1), then the tenant's tool upserts (from `1 + COLONY_PARAMS`).
static UPSERT_SQL: LazyLock<String> = LazyLock::new(|| {
    let [colony_daily, colony_monthly] = rollups::colony_sql(1);
    let [hourly, daily, monthly] = tool_rollups::tenant_sql(1 + COLONY_PARAMS);
    format!(
        "WITH colony_daily AS ({colony_daily}), colony_monthly AS ({colony_monthly}), \
         tenant_hourly AS ({hourly}), tenant_daily AS ({daily}) {monthly}"
    )
});

/// Writes a group's tenant-wide rows (nothing when there are none).
pub async fn upsert(
    tx: &mut Transaction<'_, Postgres>,
    colony: &ColonyRows,
    tools: &TenantToolRows,
) -> Result<(), sqlx::Error> {
    if colony.is_empty() && tools.is_empty() {
        return Ok(());
    }
    let q = rollups::bind_colony_rows(sqlx::query(UPSERT_SQL.as_str()), colony)?;
    tool_rollups::bind_tenant_rows(q, tools)?
        .execute(&mut **tx)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statement_binds_the_tool_rows_after_the_colony_rows() {
        let sql = UPSERT_SQL.as_str();
        let colony = &sql[sql.find("usage_rollups_colony_monthly").unwrap()..];
        assert!(colony.contains("unnest($1::uuid[]"), "{sql}");
        assert!(colony.contains("$22::int8[]) AS u(tenant_id"), "{sql}");
        let tools = &sql[sql.find("INSERT INTO tool_rollups_tenant_monthly").unwrap()..];
        assert!(
            tools.contains("unnest($23::uuid[], $24::timestamptz[], $25::int4[]"),
            "{sql}"
        );
        assert!(tools.contains("($34::int8[])[u.hist_from"), "{sql}");
        assert!(!sql.contains("$35"), "{sql}");
        // Locked in one order: colony days, months, then the tool hours, days, months.
        let at = |t: &str| sql.find(&format!("INSERT INTO {t} ")).unwrap();
        assert!(at("usage_rollups_colony_daily") < at("usage_rollups_colony_monthly"));
        assert!(at("usage_rollups_colony_monthly") < at("tool_rollups_tenant_hourly"));
        assert!(at("tool_rollups_tenant_hourly") < at("tool_rollups_tenant_daily"));
        assert!(at("tool_rollups_tenant_daily") < at("tool_rollups_tenant_monthly"));
    }
}
