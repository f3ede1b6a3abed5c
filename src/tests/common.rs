// Shared helpers for the #[pg_test] suites (included into `mod tests` in lib.rs).

use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::Value;

/// Run a query returning one jsonb value.
fn j(sql: &str) -> Value {
    Spi::get_one::<JsonB>(sql).expect("query").expect("non-NULL jsonb").0
}

fn i64_of(sql: &str) -> i64 {
    Spi::get_one::<i64>(sql).expect("query").expect("non-NULL")
}

fn text_of(sql: &str) -> Option<String> {
    Spi::get_one::<String>(sql).expect("query")
}

/// Run a statement in a subtransaction and report `SQLSTATE: message`, or "ok".
/// The subtransaction is rolled back on error, so "changes nothing" can be checked after.
fn sqlstate_of(sql: &str) -> String {
    // Created once per session (a later SET ROLE may not replace it), owned by the caller.
    Spi::run(
        "DO $d$ BEGIN IF to_regprocedure('pg_temp.sqlstate_of(text)') IS NULL THEN
           CREATE FUNCTION pg_temp.sqlstate_of(q text) RETURNS text LANGUAGE plpgsql AS $f$
           BEGIN EXECUTE q; RETURN 'ok';
           EXCEPTION WHEN others THEN RETURN SQLSTATE || ': ' || SQLERRM; END $f$;
         END IF; END $d$",
    )
    .unwrap();
    Spi::get_one_with_args::<String>("SELECT pg_temp.sqlstate_of($1)", &[sql.into()])
        .unwrap()
        .unwrap()
}

/// A snapshot of every queen table's row count, to prove a failed call wrote nothing.
fn table_counts() -> String {
    text_of(
        "SELECT format('%s/%s/%s/%s/%s/%s/%s',
           (SELECT count(*) FROM queen.queues), (SELECT count(*) FROM queen.log_partitions),
           (SELECT count(*) FROM queen.log_segments), (SELECT count(*) FROM queen.log_txns),
           (SELECT count(*) FROM queen.log_consumers) || '+' || (SELECT count(*) FROM queen.log_leases),
           (SELECT count(*) FROM queen.log_dlq),
           (SELECT count(*) FROM queen.consumer_groups_metadata))
           || ':' || COALESCE((SELECT string_agg(c.committed::text || coalesce(l.batch_end::text, '-'), ',')
                                FROM queen.log_consumers c LEFT JOIN queen.log_leases l USING (partition_id, consumer_group)), '')",
    )
    .unwrap()
}

/// Push `n` JSON messages with transactionIds `<prefix>0..` into queue/partition.
fn push_n(queue: &str, partition: &str, prefix: &str, n: usize) -> Value {
    let payloads: Vec<String> = (0..n).map(|i| format!("{{\"n\":{i}}}")).collect();
    let txns: Vec<String> = (0..n).map(|i| format!("'{prefix}{i}'")).collect();
    j(&format!(
        "SELECT queen.push('{queue}', '[{}]'::jsonb, ARRAY[{}]::text[], '{partition}')",
        payloads.join(","),
        txns.join(",")
    ))
}

fn pid_of(queue: &str, partition: &str) -> String {
    text_of(&format!(
        "SELECT p.id::text FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
          WHERE q.name = '{queue}' AND p.name = '{partition}'"
    ))
    .expect("partition exists")
}

/// Lease a batch with log_pop_v1: returns (first offset, last offset) served.
fn lease(queue: &str, group: &str, worker: &str, budget: i32) -> Option<(i64, i64)> {
    let first = Spi::get_one::<i64>(&format!(
        "SELECT min(r_base + r_start_idx) FROM queen.log_pop_v1('{queue}', 'Default', '{group}', {budget}, 30, '{worker}')"
    ))
    .unwrap()?;
    let end = i64_of(&format!(
        "SELECT batch_end FROM queen.log_leases c JOIN queen.log_partitions p ON p.id = c.partition_id
          JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = '{queue}' AND c.consumer_group = '{group}'"
    ));
    Some((first, end))
}

/// The cursor row as "committed|batch_end|worker|retry|attempt_offset|attempt_count|total".
fn cursor(queue: &str, group: &str) -> String {
    text_of(&format!(
        "SELECT concat_ws('|', committed, coalesce(batch_end::text, '-'), coalesce(worker_id, '-'),
                batch_retry_count, coalesce(attempt_offset::text, '-'), coalesce(attempt_count, 0), total_consumed)
           FROM queen.log_consumers c LEFT JOIN queen.log_leases l USING (partition_id, consumer_group)
           JOIN queen.log_partitions p ON p.id = c.partition_id
           JOIN queen.queues q ON q.id = p.queue_id
          WHERE q.name = '{queue}' AND c.consumer_group = '{group}'"
    ))
    .expect("cursor exists")
}

/// Hex hash of a transactionId as a bytea literal for ARRAY[...].
fn h(txn: &str) -> String {
    format!("queen.xxh3_128('{txn}')")
}

fn ack_hash(queue: &str, group: &str, worker: &str, txns: &[&str], statuses: Option<&[&str]>) -> Value {
    let hs: Vec<String> = txns.iter().map(|t| h(t)).collect();
    let st = match statuses {
        Some(s) => format!(
            "ARRAY[{}]::text[]",
            s.iter().map(|x| format!("'{x}'")).collect::<Vec<_>>().join(",")
        ),
        None => "NULL".into(),
    };
    let w = if worker.is_empty() { "NULL".to_string() } else { format!("'{worker}'") };
    j(&format!(
        "SELECT queen.log_ack_by_hash_v1('{}'::uuid, '{group}', {w}, ARRAY[{}]::bytea[], {st})",
        pid_of(queue, "Default"),
        hs.join(",")
    ))
}

/// A segment blob of frames (transactionId, payload bytes), encoded by the shared codec.
fn frames_blob(frames: &[(&str, &[u8])]) -> Vec<u8> {
    let frames: Vec<queen_log::frame::Frame> = frames
        .iter()
        .map(|(txn, payload)| queen_log::frame::Frame {
            message_id: *uuid::Uuid::now_v7().as_bytes(),
            trace_id: None,
            transaction_id: txn.to_string(),
            producer_sub: None,
            encrypted: false,
            payload: payload.to_vec(),
        })
        .collect();
    queen_log::segment::encode_segment(&frames).unwrap()
}

/// A valid segment of frames with these transactionIds (payload `{}`) as a bytea literal.
fn seg(txns: &[&str]) -> String {
    let frames: Vec<(&str, &[u8])> = txns.iter().map(|t| (*t, &b"{}"[..])).collect();
    let hex: String = frames_blob(&frames).iter().map(|b| format!("{b:02x}")).collect();
    format!("'\\x{hex}'::bytea")
}
