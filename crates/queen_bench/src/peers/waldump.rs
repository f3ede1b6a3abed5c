//! WAL anatomy: which records a consume cycle writes. The bench notes the WAL position
//! around a measured run, reads that range with the server's own `pg_waldump` (the bench
//! runs on the database host, as root or postgres), and sums record bytes per record
//! type and relation.

use std::collections::HashMap;

use tokio_postgres::Client;

use crate::common::{to_s, BResult};

/// One aggregated kind of record.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Kind {
    /// `rmgr/TYPE`, e.g. `Heap/HOT_UPDATE`.
    pub record: String,
    /// The first block reference's relfilenode triple `spc/db/node`, or `-`.
    pub rel: String,
    pub count: u64,
    pub bytes: u64,
    /// Bytes of full-page images (total length − record length).
    pub fpi_bytes: u64,
}

/// Sums pg_waldump's per-record lines by (record type, first relation).
pub fn aggregate(dump: &str) -> Vec<Kind> {
    let mut by: HashMap<(String, String), Kind> = HashMap::new();
    for line in dump.lines() {
        let Some(rest) = line.strip_prefix("rmgr: ") else {
            continue;
        };
        let mut it = rest.split_whitespace();
        let rmgr = it.next().unwrap_or("?").to_string();
        let Some(lens) = rest.split("len (rec/tot):").nth(1) else {
            continue;
        };
        let mut nums = lens
            .split(',')
            .next()
            .unwrap_or("")
            .split('/')
            .map(|x| x.trim().parse::<u64>().unwrap_or(0));
        let (rec, tot) = (nums.next().unwrap_or(0), nums.next().unwrap_or(0));
        let desc = rest
            .split("desc: ")
            .nth(1)
            .and_then(|d| d.split_whitespace().next())
            .unwrap_or("?");
        let rel = rest
            .split("rel ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .map(|r| r.trim_end_matches(',').to_string())
            .unwrap_or_else(|| "-".into());
        let record = format!("{rmgr}/{desc}");
        let k = by.entry((record.clone(), rel.clone())).or_insert(Kind {
            record,
            rel,
            ..Kind::default()
        });
        k.count += 1;
        k.bytes += tot;
        k.fpi_bytes += tot.saturating_sub(rec);
    }
    let mut v: Vec<Kind> = by.into_values().collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.record.cmp(&b.record)));
    v
}

/// The WAL insert position as a byte count.
pub async fn lsn(db: &Client) -> BResult<i64> {
    db.query_one(
        "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint",
        &[],
    )
    .await
    .map(|r| r.get(0))
    .map_err(to_s)
}

fn fmt_lsn(x: i64) -> String {
    format!("{:X}/{:X}", (x as u64) >> 32, (x as u64) & 0xffff_ffff)
}

/// pg_waldump over [from, to) of the server's pg_wal, aggregated, with relation names
/// resolved in the current database. Err when the tool or the directory is unreachable.
pub async fn dump(db: &Client, from: i64, to: i64) -> BResult<Vec<Kind>> {
    let r = db
        .query_one(
            "SELECT (SELECT setting FROM pg_config WHERE name = 'BINDIR'),
                    current_setting('data_directory'),
                    (SELECT oid::text FROM pg_database WHERE datname = current_database())",
            &[],
        )
        .await
        .map_err(to_s)?;
    let (bindir, data, dboid): (String, String, String) = (r.get(0), r.get(1), r.get(2));
    // A commit flushes every record before it to disk for the reader (its own commit
    // record lies after `to`).
    db.batch_execute("SELECT pg_current_xact_id()")
        .await
        .map_err(to_s)?;
    let out = std::process::Command::new(format!("{bindir}/pg_waldump"))
        .arg("-p")
        .arg(format!("{data}/pg_wal"))
        .arg("-s")
        .arg(fmt_lsn(from))
        .arg("-e")
        .arg(fmt_lsn(to))
        .output()
        .map_err(|e| format!("running {bindir}/pg_waldump: {e}"))?;
    if !out.status.success() && out.stdout.is_empty() {
        return Err(format!(
            "pg_waldump: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let mut kinds = aggregate(&String::from_utf8_lossy(&out.stdout));
    let mut names: HashMap<String, String> = HashMap::new();
    for k in &mut kinds {
        let parts: Vec<&str> = k.rel.split('/').collect();
        if parts.len() != 3 || parts[1] != dboid {
            continue;
        }
        if !names.contains_key(&k.rel) {
            let node: i64 = parts[2].parse().unwrap_or(0);
            let name = db
                .query_opt(
                    "SELECT c.oid::regclass::text FROM pg_class c
                      WHERE pg_relation_filenode(c.oid) = $1::bigint::oid",
                    &[&node],
                )
                .await
                .ok()
                .flatten()
                .map(|r| r.get::<_, String>(0))
                .unwrap_or_else(|| format!("relfilenode {node}"));
            names.insert(k.rel.clone(), name);
        }
        k.rel = names[&k.rel].clone();
    }
    Ok(kinds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregates_records_by_type_and_relation() {
        let dump = "\
rmgr: Heap        len (rec/tot):     54/    54, tx:        735, lsn: 0/0155E2B8, prev 0/0155E280, desc: LOCK off 2: xid 735: flags 0x00 LOCK_ONLY EXCL_LOCK , blkref #0: rel 1663/5/16390 blk 0
rmgr: Heap        len (rec/tot):     54/  8250, tx:        736, lsn: 0/0155E2F0, prev 0/0155E2B8, desc: LOCK off 3: xid 736, blkref #0: rel 1663/5/16390 blk 0 FPW
rmgr: Btree       len (rec/tot):     64/    64, tx:        736, lsn: 0/0155E330, prev 0/0155E2F0, desc: INSERT_LEAF off 5, blkref #0: rel 1663/5/16391 blk 1
rmgr: Transaction len (rec/tot):     34/    34, tx:        736, lsn: 0/0155E370, prev 0/0155E330, desc: COMMIT 2026-12-01 10:00:00.000000 UTC
pg_waldump: error: error in WAL record at 0/0155E390: invalid record length
";
        let k = aggregate(dump);
        assert_eq!(k.len(), 3);
        assert_eq!(k[0].record, "Heap/LOCK");
        assert_eq!(k[0].rel, "1663/5/16390");
        assert_eq!((k[0].count, k[0].bytes, k[0].fpi_bytes), (2, 8304, 8196));
        let commit = k.iter().find(|x| x.record == "Transaction/COMMIT").unwrap();
        assert_eq!((commit.rel.as_str(), commit.bytes), ("-", 34));
        assert_eq!(fmt_lsn(0x1_0155_E2B8), "1/155E2B8");
    }
}
