//! What a system costs the database: WAL bytes and commits per message produced and
//! consumed (cluster-wide deltas around each phase), and the size and dead tuples of the
//! system's relations after N messages, before and after a VACUUM.

use tokio_postgres::Client;

use crate::common::{to_s, BResult};

/// Cluster-wide counters at one instant.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    /// WAL insert position, bytes.
    pub wal: i64,
    /// Next transaction id: the delta counts transactions that wrote (an xid is assigned
    /// at the first write; read-only transactions take none).
    pub xid: i64,
    /// pg_stat_database.xact_commit of this database (flushed by backends on exit or at
    /// most once a second while busy: exact only once the workers disconnected).
    pub commits: i64,
    /// Checkpoints started (timed + requested): their full-page images inflate the WAL
    /// of whatever runs next.
    pub checkpoints: i64,
}

/// The statistics counters that moved between PostgreSQL majors, as the test suites read
/// them too: one row per counter and first `server_version_num` it applies to.
const PG_STATS: &str = include_str!("../../../../tests/pg_stats.tsv");

/// The SQL expression of counter `name` on a server of `version_num`
/// (`server_version_num`): of its rows in tests/pg_stats.tsv, the one of the highest
/// version not above the server's. Checkpoints moved from pg_stat_bgwriter to
/// pg_stat_checkpointer in 17.
pub fn pg_stats_expr(name: &str, version_num: i64) -> Option<&'static str> {
    PG_STATS
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.splitn(3, '\t');
            let (n, since, expr) = (f.next()?, f.next()?.parse::<i64>().ok()?, f.next()?);
            (n == name && since <= version_num).then_some((since, expr))
        })
        .max_by_key(|(since, _)| *since)
        .map(|(_, expr)| expr)
}

impl Counters {
    pub async fn read(db: &Client) -> BResult<Counters> {
        let _ = db.batch_execute("SELECT pg_stat_force_next_flush()").await;
        let version: i64 = db
            .query_one("SELECT current_setting('server_version_num')::bigint", &[])
            .await
            .map_err(to_s)?
            .get(0);
        let checkpoints = pg_stats_expr("checkpoints", version)
            .ok_or_else(|| format!("tests/pg_stats.tsv has no checkpoints row for {version}"))?;
        let r = db
            .query_one(
                &format!(
                    "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint,
                        pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
                        (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
                        {checkpoints}"
                ),
                &[],
            )
            .await
            .map_err(to_s)?;
        Ok(Counters {
            wal: r.get(0),
            xid: r.get(1),
            commits: r.get(2),
            checkpoints: r.get(3),
        })
    }

    pub fn since(&self, before: &Counters) -> Counters {
        Counters {
            wal: self.wal - before.wal,
            xid: self.xid - before.xid,
            commits: self.commits - before.commits,
            checkpoints: self.checkpoints - before.checkpoints,
        }
    }
}

/// A checkpoint now, so that the WAL a fill writes cannot trigger one inside the
/// measured cell that follows (nor can checkpoint_timeout, for 5 minutes).
pub async fn checkpoint(db: &Client) -> BResult<()> {
    db.batch_execute("CHECKPOINT")
        .await
        .map_err(|e| format!("CHECKPOINT: {}", to_s(&e)))
}

/// Heap (with TOAST) and index bytes, live and dead tuples of every table of a schema.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sizes {
    pub heap: i64,
    pub index: i64,
    pub live: i64,
    pub dead: i64,
}

/// Exact counts from pgstattuple (a full scan of each table and its TOAST table).
pub async fn sizes(db: &Client, schema: &str) -> BResult<Sizes> {
    let r = db
        .query_one(
            "WITH t AS (SELECT c.oid, c.reltoastrelid FROM pg_class c
                          JOIN pg_namespace n ON n.oid = c.relnamespace
                         WHERE n.nspname = $1 AND c.relkind = 'r'),
                  scanned AS (SELECT oid FROM t UNION ALL
                              SELECT reltoastrelid FROM t WHERE reltoastrelid <> 0)
             SELECT (SELECT coalesce(sum(pg_table_size(oid)), 0)::bigint FROM t),
                    (SELECT coalesce(sum(pg_indexes_size(oid)), 0)::bigint FROM t),
                    coalesce(sum(s.tuple_count), 0)::bigint,
                    coalesce(sum(s.dead_tuple_count), 0)::bigint
               FROM scanned, LATERAL pgstattuple(scanned.oid::regclass) s",
            &[&schema],
        )
        .await
        .map_err(|e| format!("sizes of schema {schema}: {}", to_s(&e)))?;
    Ok(Sizes {
        heap: r.get(0),
        index: r.get(1),
        live: r.get(2),
        dead: r.get(3),
    })
}

/// VACUUM of every table of a schema (one statement each: VACUUM runs outside a
/// transaction block).
pub async fn vacuum(db: &Client, schema: &str) -> BResult<()> {
    let rows = db
        .query(
            "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c
               JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = $1 AND c.relkind = 'r'",
            &[&schema],
        )
        .await
        .map_err(to_s)?;
    for r in rows {
        let t: String = r.get(0);
        db.batch_execute(&format!("VACUUM {t}"))
            .await
            .map_err(|e| format!("VACUUM {t}: {}", to_s(&e)))?;
    }
    Ok(())
}

/// One top-level statement's server time since the last pg_stat_statements reset.
#[derive(Clone, Debug, Default)]
pub struct Stmt {
    pub query: String,
    pub calls: i64,
    pub mean_ms: f64,
    pub total_ms: f64,
}

/// Top-level statements of this database by total execution time (the bench's own
/// bookkeeping left out).
pub async fn statements(db: &Client, schema: &str) -> BResult<Vec<Stmt>> {
    let rows = db
        .query(
            &format!(
                "SELECT query, calls, mean_exec_time, total_exec_time FROM {schema}.pg_stat_statements
                  WHERE toplevel AND calls > 0
                    AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                    AND query !~* 'pg_stat_statements|pg_current_wal|pg_current_xact_id|pg_stat_force_next_flush|pg_config|^(BEGIN|COMMIT)'
                  ORDER BY total_exec_time DESC LIMIT 8"
            ),
            &[],
        )
        .await
        .map_err(to_s)?;
    Ok(rows
        .iter()
        .map(|r| Stmt {
            query: r.get(0),
            calls: r.get(1),
            mean_ms: r.get(2),
            total_ms: r.get(3),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::pg_stats_expr;

    #[test]
    fn checkpoints_come_from_pg_stat_bgwriter_before_17_and_pg_stat_checkpointer_from_17() {
        assert!(pg_stats_expr("checkpoints", 150_020)
            .unwrap()
            .contains("FROM pg_stat_bgwriter"));
        assert!(pg_stats_expr("checkpoints", 170_000)
            .unwrap()
            .contains("FROM pg_stat_checkpointer"));
        assert!(pg_stats_expr("checkpoints", 180_006)
            .unwrap()
            .contains("FROM pg_stat_checkpointer"));
    }

    #[test]
    fn wal_syncs_come_from_pg_stat_wal_before_18_and_pg_stat_io_from_18() {
        assert!(pg_stats_expr("wal_syncs", 170_011)
            .unwrap()
            .contains("FROM pg_stat_wal"));
        assert!(pg_stats_expr("wal_syncs", 180_000)
            .unwrap()
            .contains("FROM pg_stat_io"));
        assert_eq!(pg_stats_expr("no_such_counter", 180_000), None);
    }
}
