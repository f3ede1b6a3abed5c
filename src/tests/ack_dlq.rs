// #[pg_test]s for a dlq verdict filed in the ack's own call (log_ack_by_hash_v2,
// queen.ack), what each element is told, and the bounded below-cursor test
// (docs/decisions.md, "Dead-letter filing" and "Acks of unknown hashes").

/// `log_ack_by_hash_v2` of queue `q`, group `g`: statuses and errors as SQL literals.
fn ack_v2(worker: &str, txns: &[&str], statuses: &[&str], errors: &str) -> Value {
    let hs: Vec<String> = txns.iter().map(|t| h(t)).collect();
    let st: Vec<String> = statuses.iter().map(|s| format!("'{s}'")).collect();
    j(&format!(
        "SELECT queen.log_ack_by_hash_v2('{}'::uuid, 'g', '{worker}', ARRAY[{}]::bytea[],
                                         ARRAY[{}]::text[], {errors})",
        pid_of("q", "Default"),
        hs.join(","),
        st.join(",")
    ))
}

fn hex_of(t: &str) -> String {
    text_of(&format!("SELECT queen.xxh3_128_hex('{t}')")).unwrap()
}

/// The DLQ rows as "offset|transactionId|error|retry_count", by offset.
fn dlq_rows() -> String {
    text_of(
        "SELECT coalesce(string_agg(concat_ws('|', \"offset\", transaction_id, error, retry_count), ','
                                    ORDER BY \"offset\"), '') FROM queen.log_dlq",
    )
    .unwrap()
}

/// Queue `q` with retryLimit 0 and `n` messages t0.. leased to `w` in group g.
fn exhausted_batch(n: usize) -> String {
    push_n("q", "Default", "t", n);
    Spi::run("UPDATE queen.queues SET retry_limit = 0").unwrap();
    lease("q", "g", "w", n as i32).expect("leased");
    pid_of("q", "Default")
}

#[pg_test]
fn ack_v2_files_the_dlq_row_in_the_same_call() {
    let pid = exhausted_batch(1);
    let r = ack_v2("w", &["t0"], &["failed"], "ARRAY['boom']");
    assert_eq!((r["dlq"].as_bool(), r["off"].as_i64()), (Some(true), Some(0)), "{r}");
    assert_eq!(r["leaseReleased"], true, "{r}");
    // The row exists right after the call, under the id the call answered; no second call.
    let id = r["dlqId"].as_str().expect("dlqId");
    assert_eq!(text_of(&format!("SELECT partition_id::text FROM queen.log_dlq WHERE id = '{id}'")).unwrap(), pid);
    assert_eq!(dlq_rows(), "0|t0|boom|0");
    assert_eq!(cursor("q", "g"), "0|-|-|0|-|0|1", "retired, lease released, state reset");
    // The hand-off of log_dlq_head_v1 would now be refused: the frame is filed once.
    let again = j(&format!("SELECT queen.log_dlq_head_v1('{pid}', 'g', NULL, 0, NULL, NULL, NULL, 'x')"));
    assert_eq!(again["error"], "already committed");
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_dlq"), 1);
}

#[pg_test]
fn ack_v2_exhausted_batch_files_the_head_and_says_the_rest_redeliver() {
    exhausted_batch(4);
    let r = ack_v2("w", &["t0", "t1", "t2", "t3"], &["failed"; 4], "NULL");
    assert_eq!((r["dlq"].as_bool(), r["headIndex"].as_i64()), (Some(true), Some(0)), "{r}");
    assert_eq!(r["redeliveredHashes"], serde_json::json!([hex_of("t1"), hex_of("t2"), hex_of("t3")]));
    assert_eq!(dlq_rows(), "0|t0|Retries exhausted|0", "only the head is filed");
    assert_eq!(lease("q", "g", "w2", 10), Some((1, 3)), "t1..t3 are delivered again");
}

#[pg_test]
fn ack_v2_completed_below_the_head_commit_and_above_it_redeliver() {
    exhausted_batch(4);
    let r = ack_v2("w", &["t0", "t1", "t2", "t3"], &["ok", "failed", "ok", "failed"], "NULL");
    assert_eq!((r["off"].as_i64(), r["acked"].as_i64()), (Some(1), Some(1)), "{r}");
    assert_eq!(r["redeliveredHashes"], serde_json::json!([hex_of("t2"), hex_of("t3")]));
    assert_eq!(dlq_rows(), "1|t1|Retries exhausted|0");
    assert_eq!(cursor("q", "g"), "1|-|-|0|-|0|2");
}

#[pg_test]
fn ack_v2_error_text_is_the_heads_else_the_first_nacks_else_retries_exhausted() {
    exhausted_batch(3);
    // The head (t0) has no error: the first nack that carries one.
    let r = ack_v2("w", &["t0", "t1", "t2"], &["failed", "ok", "retry"], "ARRAY[NULL, 'ok items never count', 'second']");
    assert_eq!(r["dlq"], true, "{r}");
    lease("q", "g", "w", 3);
    // The head's own error wins; '' is no error.
    ack_v2("w", &["t1", "t2"], &["failed", "failed"], "ARRAY['head', 'other']");
    lease("q", "g", "w", 3);
    ack_v2("w", &["t2"], &["dlq"], "ARRAY['']");
    assert_eq!(dlq_rows(), "0|t0|second|0,1|t1|head|0,2|t2|Retries exhausted|0");
}

#[pg_test]
fn ack_v2_misaligned_errors_raise_and_change_nothing() {
    exhausted_batch(2);
    let before = table_counts();
    let e = sqlstate_of(&format!(
        "SELECT queen.log_ack_by_hash_v2('{}'::uuid, 'g', 'w', ARRAY[{}, {}]::bytea[], ARRAY['failed','failed'], ARRAY['x'])",
        pid_of("q", "Default"), h("t0"), h("t1")
    ));
    assert_eq!(e, "P0001: QACK misaligned arrays: 2 hashes, 1 errors");
    assert_eq!(table_counts(), before);
}

#[pg_test]
fn ack_v1_keeps_the_hand_off_answer() {
    exhausted_batch(2);
    let r = ack_hash("q", "g", "w", &["t0", "t1"], Some(&["failed", "failed"]));
    assert_eq!((r["dlq"].as_bool(), r.get("dlqId")), (Some(true), None), "{r}");
    assert_eq!(r.get("redeliveredHashes"), None, "the lease is kept for the caller's filing");
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_dlq"), 0);
    assert_eq!(cursor("q", "g"), "-1|1|w|0|0|1|0");
}

#[pg_test]
fn ack_v2_refused_filing_keeps_the_lease_and_says_why() {
    let pid = exhausted_batch(1);
    // The frame's segment retained away under the lease: nothing to file.
    Spi::run(&format!("UPDATE queen.log_partitions SET log_start = 1 WHERE id = '{pid}'")).unwrap();
    let r = ack_v2("w", &["t0"], &["failed"], "NULL");
    assert_eq!((r["dlq"].as_bool(), r.get("dlqId")), (Some(true), None), "{r}");
    assert_eq!(r["dlqRefused"], "no such message: offset outside the partition's log");
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_dlq"), 0);
    assert_eq!(cursor("q", "g"), "-1|0|w|0|0|1|0", "hand-off state: lease kept");
}

#[pg_test]
fn sql_ack_files_the_dlq_in_the_same_call_with_its_errors() {
    let pid = exhausted_batch(2);
    let lease_id = "w";
    let r = j(&format!(
        "SELECT queen.ack('{pid}', '{lease_id}', ARRAY['t0','t1'], ARRAY['failed','failed'], 'g', ARRAY['bad t0', NULL])"
    ));
    assert!(r["dlqId"].is_string(), "{r}");
    assert_eq!(r["redeliveredHashes"], serde_json::json!([hex_of("t1")]));
    assert_eq!(dlq_rows(), "0|t0|bad t0|0");
    // The old argument list still works (p_errors defaults to none).
    lease("q", "g", "w", 1);
    let r = j(&format!("SELECT queen.ack('{pid}', 'w', ARRAY['t1'], ARRAY['dlq'], 'g')"));
    assert!(r["dlqId"].is_string(), "{r}");
    assert_eq!(dlq_rows(), "0|t0|bad t0|0,1|t1|Retries exhausted|0");
}

#[pg_test]
fn ack_of_unknown_hashes_resolves_unresolved_and_touches_nothing() {
    push_n("q", "Default", "t", 3);
    lease("q", "g", "w", 2);
    ack_hash("q", "g", "w", &["t0"], None);
    let before = table_counts();
    let cur = cursor("q", "g");
    let r = ack_v2("w", &["bogus-1", "bogus-2"], &["ok", "failed"], "NULL");
    assert_eq!(r["unresolvedHashes"], serde_json::json!([hex_of("bogus-1"), hex_of("bogus-2")]), "{r}");
    assert_eq!((r["acked"].as_i64(), r["leaseReleased"].as_bool()), (Some(0), Some(false)));
    assert_eq!((r.get("dlq"), r.get("redeliveredHashes")), (None, None));
    assert_eq!(table_counts(), before);
    assert_eq!(cursor("q", "g"), cur);
}

#[pg_test]
fn the_below_cursor_test_looks_only_within_its_window() {
    // One segment of BELOW_WINDOW + 1 messages, all acked lease-less: the cursor sits at
    // its end (offset BELOW_WINDOW). t0 lies one offset below the window, t1 at its low end.
    let n = queen_log::ack::BELOW_WINDOW as usize + 1;
    j(&format!(
        "SELECT queen.push('q', (SELECT jsonb_agg(g) FROM generate_series(1, {n}) g),
                           ARRAY(SELECT 't' || g FROM generate_series(0, {n} - 1) g ORDER BY g))"
    ));
    Spi::run("INSERT INTO queen.log_consumers (partition_id, consumer_group) SELECT id, 'g' FROM queen.log_partitions").unwrap();
    let last = format!("t{}", n - 1);
    assert_eq!(ack_hash("q", "g", "", &[&last], None)["acked"].as_i64(), Some(n as i64));
    let r = ack_hash("q", "g", "", &["t0", "t1", &last], None);
    assert_eq!(r["noopHashes"], serde_json::json!([hex_of("t1"), hex_of(&last)]), "{r}");
    assert_eq!(r["unresolvedHashes"], serde_json::json!([hex_of("t0")]));
}
