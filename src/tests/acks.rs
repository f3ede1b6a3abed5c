// #[pg_test]s for the ack contract (§6–§10), one per rule, named after it.

/// Queue `q` with one partition holding `n` messages t0..t(n-1), leased 0..n-1 to `w`.
fn leased_batch(n: usize) -> String {
    push_n("q", "Default", "t", n);
    lease("q", "g", "w", n as i32).expect("leased");
    pid_of("q", "Default")
}

#[pg_test]
fn ack_full_batch_releases_lease_and_resets_state() {
    leased_batch(3);
    Spi::run("UPDATE queen.log_consumers SET batch_retry_count = 2").unwrap();
    let r = ack_hash("q", "g", "w", &["t0", "t1", "t2"], None);
    assert_eq!(r, serde_json::json!({"ok": true, "acked": 3, "off": 2, "noopHashes": [], "staleHashes": [],
                                     "unresolvedHashes": [], "leaseReleased": true}));
    assert_eq!(cursor("q", "g"), "2|-|-|0|-|0|3");
}

#[pg_test]
fn ack_implicit_gap_completion() {
    leased_batch(4);
    let r = ack_hash("q", "g", "w", &["t2"], None);
    assert_eq!(r["acked"], 3);
    assert_eq!(cursor("q", "g"), "2|3|w|0|3|1|3", "partial: lease kept, attempt_offset = new + 1");
}

#[pg_test]
fn ack_partial_keeps_the_lease() {
    leased_batch(3);
    let r = ack_hash("q", "g", "w", &["t0"], None);
    assert_eq!((r["acked"].as_i64(), r["leaseReleased"].as_bool()), (Some(1), Some(false)));
    assert_eq!(cursor("q", "g"), "0|2|w|0|1|1|1");
}

#[pg_test]
fn ack_lowest_signal_wins_and_completed_above_it_redeliver() {
    leased_batch(4);
    let r = ack_hash("q", "g", "w", &["t0", "t1", "t2", "t3"], Some(&["ok", "retry", "completed", "failed"]));
    assert_eq!((r["off"].as_i64(), r["acked"].as_i64()), (Some(0), Some(1)));
    assert_eq!(cursor("q", "g"), "0|-|-|0|0|1|1", "retry: released, budget untouched");
    assert_eq!(lease("q", "g", "w2", 10), Some((1, 3)), "t1..t3 redeliver");
}

#[pg_test]
fn ack_signal_tie_break_dlq_over_failed_over_retry() {
    let pid = leased_batch(2);
    // Two signals on one offset: the same transactionId nacked twice.
    let r = ack_hash("q", "g", "w", &["t1", "t1", "t1"], Some(&["retry", "dlq", "failed"]));
    assert_eq!(r["dlq"], true);
    assert_eq!((r["off"].as_i64(), r["partitionId"].as_str()), (Some(1), Some(pid.as_str())));
    assert_eq!((r["group"].as_str(), r["worker"].as_str()), (Some("g"), Some("w")));
    assert_eq!(cursor("q", "g"), "-1|1|w|0|0|1|0", "dlq hand-off keeps the lease");
}

#[pg_test]
fn ack_noop_stale_unresolved_lists() {
    push_n("q", "Default", "t", 3);
    lease("q", "g", "w", 2);
    ack_hash("q", "g", "w", &["t0", "t1"], None);
    lease("q", "g", "w", 1);
    let r = ack_hash("q", "g", "w", &["t0", "t1", "zz", "t2"], Some(&["ok", "failed", "ok", "ok"]));
    let hex = |t: &str| text_of(&format!("SELECT queen.xxh3_128_hex('{t}')")).unwrap();
    assert_eq!(r["noopHashes"], serde_json::json!([hex("t0")]));
    assert_eq!(r["staleHashes"], serde_json::json!([hex("t1")]));
    assert_eq!(r["unresolvedHashes"], serde_json::json!([hex("zz")]));
    assert_eq!(r["acked"], 1);
}

#[pg_test]
fn ack_below_cursor_repush_does_not_shadow_in_span_copy() {
    push_n("q", "Default", "t", 2);
    lease("q", "g", "w", 2);
    ack_hash("q", "g", "w", &["t0", "t1"], None);
    // Re-push t0 with dedup off: offset 2 carries the same hash as offset 0.
    j(&format!("SELECT queen.log_push_one_v1('q', 'Default', 1, queen.xxh3_128('t0'), -1, {}, NULL, 0)", seg(&["t0"])));
    lease("q", "g", "w", 5);
    let r = ack_hash("q", "g", "w", &["t0"], None);
    assert_eq!((r["acked"].as_i64(), r["off"].as_i64()), (Some(1), Some(2)));
    assert_eq!(r["noopHashes"], serde_json::json!([]));
}

#[pg_test]
fn ack_leaseless_advances_the_cursor() {
    push_n("q", "Default", "t", 3);
    Spi::run("INSERT INTO queen.log_consumers (partition_id, consumer_group) SELECT id, 'g' FROM queen.log_partitions").unwrap();
    let r = ack_hash("q", "g", "", &["t1"], Some(&["failed"]));
    assert_eq!((r["acked"].as_i64(), r["leaseReleased"].as_bool()), (Some(0), Some(false)), "signals need a lease");
    let r = ack_hash("q", "g", "", &["t1"], None);
    assert_eq!(r["acked"], 2);
    assert_eq!(cursor("q", "g"), "1|-|-|0|-|0|2");
}

#[pg_test]
fn ack_wrong_or_expired_lease_changes_nothing() {
    leased_batch(2);
    let before = table_counts();
    let r = ack_hash("q", "g", "other", &["t0"], None);
    assert_eq!(r, serde_json::json!({"ok": false, "error": "invalid or expired lease"}));
    Spi::run("UPDATE queen.log_leases SET lease_expires_at = clock_timestamp() - interval '1 s'").unwrap();
    let r = ack_hash("q", "g", "w", &["t0"], None);
    assert_eq!(r["error"], "invalid or expired lease");
    assert_eq!(table_counts(), before);
    let r = j("SELECT queen.log_ack_by_hash_v1(gen_random_uuid(), 'g', NULL, ARRAY[]::bytea[], NULL)");
    assert_eq!(r["error"], "consumer not found");
}

#[pg_test]
fn ack_failed_charges_budget_then_dlq_keeps_lease_then_dlq_head_files() {
    let pid = leased_batch(2);
    Spi::run("UPDATE queen.queues SET retry_limit = 1").unwrap();
    let r = ack_hash("q", "g", "w", &["t0"], Some(&["failed"]));
    assert_eq!((r["off"].as_i64(), r["leaseReleased"].as_bool()), (Some(-1), Some(true)));
    assert_eq!(cursor("q", "g"), "-1|-|-|1|0|1|0");
    lease("q", "g", "w2", 2);
    assert_eq!(cursor("q", "g"), "-1|1|w2|1|0|2|0", "redelivery is attempt 2");
    let r = ack_hash("q", "g", "w2", &["t0", "t1"], Some(&["ok", "failed"]));
    assert_eq!((r["dlq"].as_bool(), r["off"].as_i64(), r["acked"].as_i64()), (Some(true), Some(1), Some(1)));
    assert_eq!(cursor("q", "g"), "0|1|w2|1|0|2|1", "budget spent: hand-off keeps lease and counter");
    let filed = j(&format!("SELECT queen.log_dlq_head_v1('{pid}', 'g', 'w2', 1, NULL, NULL, NULL, 'boom')"));
    assert_eq!(filed["ok"], true);
    assert_eq!(text_of("SELECT concat_ws('|', \"offset\", transaction_id, payload::text, error, retry_count) FROM queen.log_dlq").unwrap(),
               "1|t1|{\"n\": 1}|boom|1");
    assert_eq!(cursor("q", "g"), "1|-|-|0|-|0|2");
    let again = j(&format!("SELECT queen.log_dlq_head_v1('{pid}', 'g', NULL, 1, NULL, NULL, NULL, 'boom')"));
    assert_eq!(again["error"], "already committed");
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_dlq"), 1);
}

#[pg_test]
fn ack_failed_with_dlq_disabled_drops_the_poison_frame() {
    leased_batch(3);
    Spi::run("UPDATE queen.queues SET retry_limit = 0, dead_letter_queue = false, dlq_after_max_retries = false").unwrap();
    let r = ack_hash("q", "g", "w", &["t0", "t1"], Some(&["ok", "failed"]));
    assert_eq!((r["dropped"].as_bool(), r["off"].as_i64(), r["acked"].as_i64()), (Some(true), Some(1), Some(1)));
    assert_eq!(cursor("q", "g"), "1|-|-|0|0|1|2");
}

#[pg_test]
fn purge_with_a_future_cutoff_keeps_the_hashes_of_a_leased_batch() {
    // 0.1.0 purged them (deleted 1, new_txns_start 2): the batch could then never be
    // acked by id and a duplicate inside the window was accepted (0.1.0 accepted a cutoff in the future).
    let pid = leased_batch(2);
    let step = j(&format!("SELECT queen.log_txns_purge_step_v1('{pid}', clock_timestamp() + interval '1 hour', 10)"));
    assert_eq!(step, serde_json::json!({"deleted": 0, "new_txns_start": 0, "done": true, "clamped": true}));
    let r = ack_hash("q", "g", "w", &["t0", "t1"], None);
    assert_eq!((r["acked"].as_i64(), r["leaseReleased"].as_bool()), (Some(2), Some(true)));
    assert_eq!(push_n("q", "Default", "t", 1)["status"], "duplicate");
}

#[pg_test]
fn ack_bad_input_raises_and_changes_nothing() {
    let pid = leased_batch(2);
    let before = table_counts();
    let call = |args: &str| sqlstate_of(&format!("SELECT queen.log_ack_by_hash_v1('{pid}', 'g', 'w', {args})"));
    assert_eq!(call("ARRAY[queen.xxh3_128('t0')], ARRAY['ok','ok']"), "P0001: QACK misaligned arrays: 1 hashes, 2 statuses");
    assert!(call("ARRAY['\\x00'::bytea], NULL").starts_with("22023: p_hashes[1] must be 16 bytes"));
    assert!(call("ARRAY[NULL::bytea], NULL").starts_with("22023: p_hashes[1] must not be NULL"));
    assert!(call("ARRAY[queen.xxh3_128('t0')], ARRAY['done']").starts_with("22023: unknown ack status \"done\""));
    assert_eq!(sqlstate_of("SELECT queen.log_ack_by_hash_v1(NULL, 'g', 'w', ARRAY[]::bytea[], NULL)"), "22004: p_partition_id must not be NULL");
    assert_eq!(table_counts(), before);
}

#[pg_test]
fn ack_empty_hash_array_is_valid() {
    leased_batch(2);
    let r = ack_hash("q", "g", "w", &[], None);
    assert_eq!((r["ok"].as_bool(), r["acked"].as_i64()), (Some(true), Some(0)));
}

#[pg_test]
fn ack_at_clamps_to_batch_and_never_moves_backward() {
    let pid = leased_batch(3);
    let r = j(&format!("SELECT queen.log_ack_at_v1('{pid}', 'g', 'w', 5)"));
    assert_eq!(r["error"], "position beyond leased batch");
    let r = j(&format!("SELECT queen.log_ack_at_v1('{pid}', 'g', 'w', 2)"));
    assert_eq!(r, serde_json::json!({"ok": true, "acked": 3, "leaseReleased": true}));
    assert_eq!(cursor("q", "g"), "2|-|-|0|-|0|3");
    let r = j(&format!("SELECT queen.log_ack_at_v1('{pid}', 'g', NULL, 1)"));
    assert_eq!(r["error"], "no leased batch");
}

#[pg_test]
fn ack_at_release_only_redelivers_whole_batch() {
    let pid = leased_batch(3);
    let r = j(&format!("SELECT queen.log_ack_at_v1('{pid}', 'g', 'w', 2, false)"));
    assert_eq!(r, serde_json::json!({"ok": true, "acked": 0, "leaseReleased": true}));
    assert_eq!(lease("q", "g", "w2", 5), Some((0, 2)));
}

#[pg_test]
fn ack_v1_by_name_and_unknown_partition() {
    leased_batch(2);
    let r = j("SELECT queen.log_ack_v1('q', 'Default', 'g', 'w', 1)");
    assert_eq!(r["acked"], 2);
    let r = j("SELECT queen.log_ack_v1('q', 'nope', 'g', 'w', 1)");
    assert_eq!(r, serde_json::json!({"ok": false, "error": "partition not found"}));
}

#[pg_test]
fn ack_at_equals_by_hash_for_full_batch() {
    push_n("a", "Default", "t", 3);
    push_n("b", "Default", "t", 3);
    lease("a", "g", "w", 3);
    lease("b", "g", "w", 3);
    Spi::run("UPDATE queen.log_consumers SET batch_retry_count = 1").unwrap();
    ack_hash("a", "g", "w", &["t0", "t1", "t2"], None);
    j(&format!("SELECT queen.log_ack_at_v1('{}', 'g', 'w', 2)", pid_of("b", "Default")));
    assert_eq!(cursor("a", "g"), cursor("b", "g"));
}

#[pg_test]
fn ack_multi_mixes_valid_stale_lease_and_beyond_batch_rows() {
    push_n("a", "Default", "t", 2);
    push_n("b", "Default", "t", 2);
    push_n("c", "Default", "t", 2);
    lease("a", "g", "w", 2);
    lease("b", "g", "w", 2);
    lease("c", "g", "w", 2);
    let (a, b, c) = (pid_of("a", "Default"), pid_of("b", "Default"), pid_of("c", "Default"));
    let r = j(&format!(
        "SELECT queen.log_ack_multi_v1(ARRAY['{c}','{a}','{b}'], ARRAY['g','g','g'], ARRAY[1,1,9]::bigint[],
                                      ARRAY['w','stale','w'], ARRAY[2,2,2])"
    ));
    assert_eq!(r["results"], serde_json::json!([
        {"ok": true, "acked": 2, "error": null},
        {"ok": false, "acked": 0, "error": "invalid or expired lease"},
        {"ok": false, "acked": 0, "error": "position beyond leased batch"}]));
    assert_eq!(cursor("c", "g"), "1|-|-|0|-|0|2");
    assert_eq!(cursor("a", "g"), "-1|1|w|0|0|1|0");
    assert_eq!(j("SELECT queen.log_ack_multi_v1(NULL, NULL, NULL, NULL, NULL)"), serde_json::json!({"ok": true, "results": []}));
}

#[pg_test]
fn ack_multi_bad_input_raises() {
    assert_eq!(sqlstate_of("SELECT queen.log_ack_multi_v1(ARRAY['x'], ARRAY[]::text[], ARRAY[1]::bigint[], ARRAY['w'], ARRAY[1])"),
               "P0001: QACKM misaligned arrays: pids=1 groups=0 ends=1 workers=1 counts=1");
    let pid = leased_batch(1);
    assert!(sqlstate_of(&format!("SELECT queen.log_ack_multi_v1(ARRAY['{pid}'], ARRAY[NULL]::text[], ARRAY[1]::bigint[], ARRAY['w'], ARRAY[1])"))
        .starts_with("22004: QACKM NULL group at row 1"));
}

#[pg_test]
fn dlq_head_extracts_frame_or_says_no_segment_holds_it() {
    let pid = leased_batch(2);
    Spi::run("DELETE FROM queen.log_segments").unwrap();
    let r = j(&format!("SELECT queen.log_dlq_head_v1('{pid}', 'g', 'w', 0, NULL, NULL, NULL, 'bad')"));
    assert_eq!(r["ok"], true);
    let err = text_of("SELECT error FROM queen.log_dlq WHERE payload IS NULL").unwrap();
    assert_eq!(err, "bad (payload not captured: no segment holds offset 0 any more)");
}

#[pg_test]
fn renew_extends_live_leases_only_and_never_shortens() {
    leased_batch(2);
    let r = j("SELECT queen.log_renew_lease_v1('w', 600)");
    assert_eq!(r["renewed"], 1);
    let r = j("SELECT queen.log_renew_lease_v1('w', 1)");
    assert_eq!(r["renewed"], 1);
    assert!(i64_of("SELECT extract(epoch FROM lease_expires_at - clock_timestamp())::bigint FROM queen.log_leases") > 500, "never shortens");
    Spi::run("UPDATE queen.log_leases SET lease_expires_at = clock_timestamp() - interval '1 s'").unwrap();
    assert_eq!(j("SELECT queen.log_renew_lease_v1('w', 600)"), serde_json::json!({"renewed": 0, "expiresAt": null}));
}

#[pg_test]
fn purge_all_runs_on_queue_clock() {
    push_n("q", "Default", "t", 2);
    Spi::run("UPDATE queen.log_txns SET created_at = clock_timestamp() - interval '2 hours'").unwrap();
    Spi::run("UPDATE queen.queues SET dedup_window_seconds = 60").unwrap();
    push_n("q", "Default", "u", 1);
    assert_eq!(j("SELECT queen.log_txns_purge_all_v1()"), serde_json::json!({"partitions": 1, "deleted": 1}));
    assert_eq!(i64_of("SELECT txns_start FROM queen.log_partitions"), 2);
}

fn wire_push(queue: &str, txn: &str) -> String {
    let blob = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, frames_blob(&[(txn, b"{}")]));
    format!("{{\"queue\":\"{queue}\",\"partition\":\"Default\",\"count\":1,\"hashesHex\":\"{}\",\"blobB64\":\"{blob}\"}}",
            text_of(&format!("SELECT queen.xxh3_128_hex('{txn}')")).unwrap())
}

#[pg_test]
fn txn_wire_pushes_and_acks_in_one_transaction() {
    let pid = leased_batch(2);
    let h0 = text_of("SELECT queen.xxh3_128_hex('t0')").unwrap();
    let w = format!("{{\"pushes\":[{}],\"acks\":[{{\"partitionId\":\"{pid}\",\"group\":\"g\",\"worker\":\"w\",\"acks\":[{{\"h\":\"{h0}\"}}]}}]}}", wire_push("out", "o1"));
    let r = j(&format!("SELECT queen.log_transaction_wire_v1('{w}'::jsonb)"));
    assert_eq!((r["ok"].as_bool(), r["pushes"][0]["status"].as_str(), r["acks"][0]["acked"].as_i64()), (Some(true), Some("queued"), Some(1)));
    assert_eq!(cursor("q", "g"), "0|1|w|0|1|1|1");
}

#[pg_test]
fn txn_wire_rolls_back_on_duplicate_push() {
    let pid = leased_batch(2);
    push_n("out", "Default", "o", 1);
    let before = table_counts();
    let w = format!("{{\"pushes\":[{}],\"acks\":[{{\"partitionId\":\"{pid}\",\"group\":\"g\",\"worker\":\"w\",\"uptoOff\":1}}]}}", wire_push("out", "o0"));
    assert_eq!(sqlstate_of(&format!("SELECT queen.log_transaction_wire_v1('{w}'::jsonb)")),
               "23505: QDUP duplicate messages in queue \"out\" partition \"Default\"; transaction rolled back");
    assert_eq!(table_counts(), before);
}

#[pg_test]
fn txn_wire_rolls_back_on_unknown_hash_with_detail() {
    let pid = leased_batch(2);
    let before = table_counts();
    let hz = text_of("SELECT queen.xxh3_128_hex('zz')").unwrap();
    let w = format!("{{\"pushes\":[{}],\"acks\":[{{\"partitionId\":\"{pid}\",\"group\":\"g\",\"worker\":\"w\",\"acks\":[{{\"h\":\"{hz}\"}}]}}]}}", wire_push("out", "n1"));
    let detail = text_of(&format!(
        "DO $$ BEGIN PERFORM queen.log_transaction_wire_v1('{w}'::jsonb);
           EXCEPTION WHEN others THEN DECLARE d text; BEGIN GET STACKED DIAGNOSTICS d = PG_EXCEPTION_DETAIL;
             PERFORM set_config('qa.detail', SQLERRM || ' / ' || d, true); END; END $$;
         SELECT current_setting('qa.detail')"));
    assert_eq!(detail.unwrap(), format!("QTXN ack references unknown transactionId; transaction rolled back / [\"{hz}\"]"));
    assert_eq!(table_counts(), before);
}

#[pg_test]
fn txn_wire_refuses_foreign_partition_and_failed_acks() {
    let pid = leased_batch(2);
    let w = format!("{{\"acks\":[{{\"partitionId\":\"{pid}\",\"uptoOff\":1}}],\"_tenant\":\"00000000-0000-0000-0000-000000000002\"}}");
    assert_eq!(sqlstate_of(&format!("SELECT queen.log_transaction_wire_v1('{w}'::jsonb)")),
               format!("P0001: QTXN ack references partition {pid} not owned by this tenant"));
    let w = format!("{{\"acks\":[{{\"partitionId\":\"{pid}\",\"group\":\"g\",\"worker\":\"x\",\"uptoOff\":1}}]}}");
    assert_eq!(sqlstate_of(&format!("SELECT queen.log_transaction_wire_v1('{w}'::jsonb)")),
               format!("P0001: QTXN ack failed for partition {pid} group \"g\": invalid or expired lease; transaction rolled back"));
}

#[pg_test]
fn txn_wire_files_dlq_handoff_inside_the_transaction() {
    let pid = leased_batch(2);
    Spi::run("UPDATE queen.queues SET retry_limit = 0").unwrap();
    let h1 = text_of("SELECT queen.xxh3_128_hex('t1')").unwrap();
    let w = format!("{{\"acks\":[{{\"partitionId\":\"{pid}\",\"group\":\"g\",\"worker\":\"w\",\"acks\":[{{\"h\":\"{h1}\",\"ok\":false,\"error\":\"poison\"}}]}}]}}");
    let r = j(&format!("SELECT queen.log_transaction_wire_v1('{w}'::jsonb)"));
    assert!(r["acks"][0]["dlqId"].is_string(), "{r}");
    assert_eq!(text_of("SELECT transaction_id || '|' || error FROM queen.log_dlq").unwrap(), "t1|poison");
    // The filing retires the poison frame (counted once); t0 was never acked, so the
    // clamp left it below the signal and the GREATEST guard completes it silently.
    assert_eq!(cursor("q", "g"), "1|-|-|0|-|0|1");
}

#[pg_test]
fn functions_pin_search_path_against_hijacking() {
    leased_batch(2);
    // A caller's schema that shadows pg_catalog: every lease would look expired.
    Spi::run("CREATE SCHEMA evil; CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz
              LANGUAGE sql AS $$ SELECT 'infinity'::timestamptz $$").unwrap();
    Spi::run("SET LOCAL search_path = evil, pg_catalog, public").unwrap();
    assert_eq!(text_of("SELECT clock_timestamp()::text").unwrap(), "infinity", "the shadow is live");
    let r = ack_hash("q", "g", "w", &["t0", "t1"], None);
    assert_eq!((r["ok"].as_bool(), r["acked"].as_i64()), (Some(true), Some(2)), "{r}");
}
