// #[pg_test]s for schema, hashing, codec helpers, push (docs/contract.md §4) and pop (§5).

#[pg_test]
fn xxh3_known_vectors() {
    assert_eq!(text_of("SELECT queen.xxh3_128_hex('')").unwrap(), "99aa06d3014798d86001c324468d497f");
    assert_eq!(text_of("SELECT encode(queen.xxh3_128('hello'), 'hex')").unwrap(), "b5e9c1ad071b3e7fc779cfaa5e523818");
}

#[pg_test]
fn schema_has_contract_defaults() {
    Spi::run("INSERT INTO queen.queues (name) VALUES ('d')").unwrap();
    let row = text_of(
        "SELECT concat_ws('|', tenant_id, lease_time, retry_limit, dead_letter_queue,
                dlq_after_max_retries, dedup_window_seconds) FROM queen.queues WHERE name = 'd'",
    );
    assert_eq!(row.unwrap(), "00000000-0000-0000-0000-000000000001|60|3|t|t|3600");
    assert_eq!(text_of("SELECT attstorage::text FROM pg_attribute WHERE attrelid = 'queen.log_segments'::regclass AND attname = 'blob'").unwrap(), "e");
}

/// One default tenant: SQL's owner, queen.default_tenant(), is the Rust side's
/// (queen_log::conventions::DEFAULT_TENANT), and every SQL default calls it: the tables'
/// column defaults and every function's `p_tenant` (SQL and #[pg_extern] alike) name the
/// function, none spells the literal itself.
#[pg_test]
fn default_tenant_has_one_owner() {
    assert_eq!(
        text_of("SELECT queen.default_tenant()::text").unwrap(),
        queen_log::conventions::DEFAULT_TENANT.to_string()
    );
    assert_eq!(text_of("SELECT provolatile::text || proparallel::text FROM pg_proc WHERE oid = 'queen.default_tenant()'::regprocedure").unwrap(), "is");
    // Column defaults: both tenant columns call it.
    assert_eq!(i64_of("SELECT count(*) FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
                        WHERE a.attname = 'tenant_id' AND d.adrelid::regclass::text LIKE 'queen.%'
                          AND pg_get_expr(d.adbin, d.adrelid) = 'queen.default_tenant()'"), 2);
    // No default anywhere in the schema spells the uuid itself.
    assert_eq!(i64_of("SELECT count(*) FROM pg_attrdef d WHERE d.adrelid::regclass::text LIKE 'queen.%'
                          AND pg_get_expr(d.adbin, d.adrelid) LIKE '%00000000-0000-0000-0000-00000000000%'"), 0);
    assert_eq!(i64_of("SELECT count(*) FROM pg_proc WHERE pronamespace = 'queen'::regnamespace
                          AND pg_get_function_arguments(oid) LIKE '%00000000-0000-0000-0000-00000000000%'"), 0);
    // ... and every p_tenant with a default (SQL functions and #[pg_extern]s) calls it.
    assert!(i64_of("SELECT count(*) FROM pg_proc WHERE pronamespace = 'queen'::regnamespace
                       AND pg_get_function_arguments(oid) LIKE '%p_tenant uuid DEFAULT queen.default_tenant()%'") >= 40);
    // A push naming no tenant lands in it.
    push_n("dt", "Default", "t", 1);
    assert_eq!(text_of("SELECT tenant_id::text FROM queen.queues WHERE name = 'dt'").unwrap(),
               queen_log::conventions::DEFAULT_TENANT.to_string());
}

#[pg_test]
fn push_auto_creates_queue_and_partition_with_namespace_task() {
    let r = push_n("orders.eu", "p1", "t", 2);
    assert_eq!(r["status"], "queued");
    assert_eq!(r["baseOffset"], 0);
    assert_eq!(text_of("SELECT namespace || '/' || task FROM queen.queues WHERE name = 'orders.eu'").unwrap(), "orders/eu");
    push_n("plain", "Default", "t", 1);
    assert_eq!(text_of("SELECT namespace || '/' || task FROM queen.queues WHERE name = 'plain'").unwrap(), "plain/");
}

#[pg_test]
fn push_allocates_consecutive_offsets_and_writes_sidecar() {
    push_n("q", "Default", "a", 3);
    let r = push_n("q", "Default", "b", 2);
    assert_eq!(r["baseOffset"], 3);
    assert_eq!(i64_of("SELECT last_offset FROM queen.log_partitions"), 4);
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_txns WHERE length(hashes) = 16 * (end_offset - base_offset + 1)"), 2);
    assert_eq!(text_of("SELECT encode(substr(hashes, 17, 16), 'hex') FROM queen.log_txns WHERE base_offset = 3").unwrap(),
               text_of("SELECT queen.xxh3_128_hex('b1')").unwrap());
    // created_at monotone in base_offset, and createdAt has microseconds in UTC.
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_segments a JOIN queen.log_segments b ON b.base_offset > a.base_offset WHERE b.created_at < a.created_at"), 0);
    let created = r["createdAt"].as_str().unwrap().to_string();
    assert_eq!(created.len(), 27, "{created}");
    assert!(created.ends_with('Z'));
}

#[pg_test]
fn push_dedup_hit_returns_original_offsets_and_writes_nothing() {
    push_n("q", "Default", "x", 3);
    let before = table_counts();
    let r = j(&format!("SELECT queen.log_push_one_v1('q', 'Default', 2, queen.xxh3_128('new') || queen.xxh3_128('x1'), -1, {})", seg(&["new", "x1"])));
    assert_eq!(r["status"], "duplicate");
    // The original's message id comes back with its offset (read from its frame).
    let original = text_of("SELECT d.message_id::text FROM queen.log_segments s, queen.decode_segment_v1(s.blob) d
                             WHERE d.transaction_id = 'x1'").unwrap();
    assert_eq!(r["dups"], serde_json::json!([{"i": 1, "off": 1, "id": original}]));
    assert_eq!(table_counts(), before);
}

#[pg_test]
fn push_dedup_respects_verified_watermark() {
    push_n("q", "Default", "x", 3);
    // Everything up to offset 1 is verified unique: only offset 2 is probed.
    let r = j(&format!("SELECT queen.log_push_one_v1('q', 'Default', 1, queen.xxh3_128('x0'), 1, {})", seg(&["x0"])));
    assert_eq!(r["status"], "queued");
    let r = j(&format!("SELECT queen.log_push_one_v1('q', 'Default', 1, queen.xxh3_128('x2'), 1, {})", seg(&["x2"])));
    assert_eq!(r["status"], "duplicate");
}

#[pg_test]
fn push_window_zero_skips_probe_but_still_writes_sidecar() {
    push_n("q", "Default", "x", 1);
    let r = j(&format!("SELECT queen.log_push_one_v1('q', 'Default', 1, queen.xxh3_128('x0'), -1, {}, NULL, 0)", seg(&["x0"])));
    assert_eq!(r["status"], "queued");
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_txns"), 2);
}

#[pg_test]
fn push_bad_input_is_rejected_and_changes_nothing() {
    push_n("q", "Default", "x", 1);
    let before = table_counts();
    assert_eq!(sqlstate_of("SELECT queen.log_push_one_v1(NULL, 'Default', 1, '\\x00000000000000000000000000000000'::bytea, -1, '\\x00'::bytea)"),
               "22004: p_queue must not be NULL");
    assert_eq!(sqlstate_of("SELECT queen.log_push_one_v1('q', 'Default', 2, queen.xxh3_128('a'), -1, '\\x00'::bytea)"),
               "P0001: QPUSH bad segment: msg_count=2, hashes=16 bytes (want 16/msg)");
    assert_eq!(sqlstate_of("SELECT queen.log_push_one_v1('q', 'Default', 0, ''::bytea, -1, '\\x00'::bytea)"),
               "P0001: QPUSH bad segment: msg_count=0, hashes=0 bytes (want 16/msg)");
    assert_eq!(sqlstate_of("SELECT queen.log_push_multi_v1(ARRAY['q'], ARRAY[]::text[], ARRAY[1], ARRAY[queen.xxh3_128('a')], ARRAY[-1]::bigint[], ARRAY['\\x00'::bytea])"),
               "P0001: QMULTI misaligned arrays (1 queues)");
    assert_eq!(table_counts(), before);
}

#[pg_test]
fn push_multi_returns_results_in_input_order() {
    let r = j(&format!("SELECT queen.log_push_multi_v1(ARRAY['b','a','b'], ARRAY['Default','Default','Default'], ARRAY[1,2,1],
              ARRAY[queen.xxh3_128('1'), queen.xxh3_128('2') || queen.xxh3_128('3'), queen.xxh3_128('4')],
              ARRAY[-1,-1,-1]::bigint[], ARRAY[{}, {}, {}])", seg(&["1"]), seg(&["2", "3"]), seg(&["4"])));
    assert_eq!(r.as_array().unwrap().len(), 3);
    assert_eq!((r[0]["baseOffset"].as_i64(), r[1]["baseOffset"].as_i64(), r[2]["baseOffset"].as_i64()), (Some(0), Some(0), Some(1)));
    assert_eq!(j("SELECT queen.log_push_multi_v1(ARRAY[]::text[], ARRAY[]::text[], ARRAY[]::int[], ARRAY[]::bytea[], ARRAY[]::bigint[], ARRAY[]::bytea[])"), serde_json::json!([]));
}

/// A dedup watermark is trusted only for the partition id and the window it names (a
/// broker that remembered its lookup across a delete, or across a longer window, must
/// not skip the probe): otherwise the whole window is probed.
#[pg_test]
fn a_watermark_is_trusted_only_for_the_partition_and_window_it_names() {
    push_n("q", "Default", "a", 1);
    let pid = pid_of("q", "Default");
    let push = |verified_for: &str| {
        j(&format!(
            "SELECT queen.log_push_multi_v1(ARRAY['q'], ARRAY['Default'], ARRAY[1],
                    ARRAY[queen.xxh3_128('a0')], ARRAY[5]::bigint[], ARRAY[{}], NULL, {verified_for})",
            seg(&["a0"])
        ))[0]["status"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let other = "ARRAY[gen_random_uuid()], ARRAY[3600]";
    assert_eq!(push(other), "duplicate", "another partition's watermark");
    assert_eq!(push(&format!("ARRAY['{pid}'::uuid], ARRAY[60]")), "duplicate", "a shorter window's");
    // The caller's word, as it stands (nothing the dedup cache would say: it shows trust).
    assert_eq!(push(&format!("ARRAY['{pid}'::uuid], ARRAY[7200]")), "queued", "a longer window's");
    assert_eq!(push(&format!("ARRAY['{pid}'::uuid], ARRAY[3600]")), "queued", "its own");
    assert_eq!(push("NULL, NULL"), "queued", "named nothing: the caller vouches");
    assert_eq!(
        sqlstate_of(&format!(
            "SELECT queen.log_push_multi_v1(ARRAY['q'], ARRAY['Default'], ARRAY[1], ARRAY[queen.xxh3_128('a0')],
                    ARRAY[5]::bigint[], ARRAY[{}], NULL, ARRAY[]::uuid[], NULL)",
            seg(&["a0"])
        )),
        "P0001: QMULTI misaligned arrays (1 queues)"
    );
}

#[pg_test]
fn segment_at_finds_covering_segment() {
    push_n("q", "Default", "a", 3);
    push_n("q", "Default", "b", 3);
    let pid = pid_of("q", "Default");
    assert_eq!(i64_of(&format!("SELECT r_base FROM queen.log_segment_at_v1('{pid}', 4)")), 3);
    assert_eq!(i64_of(&format!("SELECT count(*) FROM queen.log_segment_at_v1('{pid}', 6)")), 0);
}

#[pg_test]
fn decode_segment_returns_frames_and_rejects_corrupt_blobs() {
    push_n("q", "Default", "a", 2);
    let txn = text_of("SELECT string_agg(transaction_id || '=' || payload::text, ',' ORDER BY frame_index)
                       FROM queen.log_segments s, queen.decode_segment_v1(s.blob) d");
    assert_eq!(txn.unwrap(), "a0={\"n\": 0},a1={\"n\": 1}");
    assert!(sqlstate_of("SELECT * FROM queen.decode_segment_v1('\\x0102'::bytea)").starts_with("22023: corrupt segment"));
}

#[pg_test]
fn pop_serves_budget_across_segments_from_mid_segment() {
    push_n("q", "Default", "a", 3);
    push_n("q", "Default", "b", 3);
    assert_eq!(lease("q", "g", "w1", 2), Some((0, 1)));
    let r = j("SELECT queen.log_ack_at_v1((SELECT id FROM queen.log_partitions), 'g', 'w1', 1)");
    assert_eq!(r["acked"], 2);
    let rows = text_of("SELECT string_agg(r_base || ':' || r_start_idx || ':' || r_take || ':' || r_msg_count, ',')
                        FROM queen.log_pop_v1('q', 'Default', 'g', 3, 30, 'w2')");
    assert_eq!(rows.unwrap(), "0:2:1:3,3:0:2:3");
    assert_eq!(cursor("q", "g"), "1|4|w2|0|2|1|2");
}

#[pg_test]
fn pop_against_live_lease_returns_nothing_without_waiting() {
    push_n("q", "Default", "a", 3);
    assert!(lease("q", "g", "w1", 1).is_some());
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_pop_v1('q', 'Default', 'g', 5, 30, 'w2')"), 0);
    assert_eq!(cursor("q", "g"), "-1|0|w1|0|0|1|0");
}

#[pg_test]
fn pop_reclaims_expired_lease_and_counts_attempts() {
    push_n("q", "Default", "a", 2);
    lease("q", "g", "w1", 2);
    Spi::run("UPDATE queen.log_leases SET lease_expires_at = clock_timestamp() - interval '1 second'").unwrap();
    assert_eq!(lease("q", "g", "w2", 2), Some((0, 1)));
    assert_eq!(cursor("q", "g"), "-1|1|w2|0|0|2|0", "redelivery counts attempt 2, no budget spent");
}

#[pg_test]
fn pop_auto_ack_advances_cursor_without_lease() {
    push_n("q", "Default", "a", 3);
    let n = i64_of("SELECT sum(r_take) FROM queen.log_pop_v1('q', 'Default', 'g', 2, 0, NULL, true)");
    assert_eq!(n, 2);
    assert_eq!(cursor("q", "g"), "1|-|-|0|-|0|2");
}

#[pg_test]
fn pop_of_caught_up_cursor_takes_no_row_lock() {
    // A row lock stamps the tuple's xmax (and needs a transaction id, so a commit record):
    // an empty re-poll of a caught-up cursor must not take one.
    push_n("q", "Default", "a", 2);
    let take = "SELECT count(*) FROM queen.log_pop_v1('q', 'Default', 'g', 5, 0, NULL, true)";
    assert_eq!(i64_of(take), 1, "one slice served");
    let xmax = "SELECT xmax::text FROM queen.log_leases WHERE consumer_group = 'g'";
    let after_serving = text_of(xmax);
    assert_eq!(i64_of(take), 0, "caught up: nothing served");
    assert_eq!(text_of(xmax), after_serving, "and the lease row was not locked again");
    push_n("q", "Default", "b", 1);
    assert_eq!(i64_of("SELECT sum(r_take) FROM queen.log_pop_v1('q', 'Default', 'g', 5, 0, NULL, true)"), 1);
    assert_eq!(cursor("q", "g"), "2|-|-|0|-|0|3");
}

#[pg_test]
fn pop_unknown_queue_returns_no_rows() {
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_pop_v1('nope', 'Default', 'g', 2, 30, 'w')"), 0);
}

#[pg_test]
fn pop_bad_input_is_rejected() {
    push_n("q", "Default", "a", 1);
    let before = table_counts();
    assert!(sqlstate_of("SELECT * FROM queen.log_pop_v1('q', 'Default', 'g', -1, 30, 'w')").starts_with("22023: p_budget"));
    assert!(sqlstate_of("SELECT * FROM queen.log_pop_v1('q', 'Default', 'g', 1, 0, 'w')").starts_with("22023: p_lease_seconds"));
    assert!(sqlstate_of("SELECT * FROM queen.log_pop_v1('q', 'Default', 'g', 1, 30, 'w', p_conflate => true)").starts_with("0A000"));
    assert_eq!(table_counts(), before);
}

#[pg_test]
fn pop_subscription_new_starts_after_existing_messages() {
    push_n("q", "Default", "old", 2);
    let n = i64_of("SELECT count(*) FROM queen.log_pop_v1('q', 'Default', 'g', 5, 30, 'w', false, 'new')");
    assert_eq!(n, 0, "a 'new' group never sees earlier messages");
    assert_eq!(cursor("q", "g"), "1|-|-|0|-|0|0");
    push_n("q", "Default", "fresh", 1);
    assert_eq!(lease("q", "g", "w", 5), Some((2, 2)));
}

#[pg_test]
fn pop_subscription_timestamp_seeds_before_first_later_segment() {
    push_n("q", "Default", "a", 2);
    Spi::run("UPDATE queen.log_segments SET created_at = '2020-01-01Z'").unwrap();
    push_n("q", "Default", "b", 2);
    let n = i64_of("SELECT count(*) FROM queen.log_pop_v1('q', 'Default', 'g', 5, 30, 'w', false, 'timestamp', '2021-01-01T00:00:00Z')");
    assert_eq!(n, 1);
    assert_eq!(cursor("q", "g"), "1|3|w|0|2|1|0");
}

#[pg_test]
fn pop_seals_cursor_when_segments_were_retained_away() {
    push_n("q", "Default", "a", 3);
    Spi::run("DELETE FROM queen.log_segments; UPDATE queen.log_partitions SET log_start = 3").unwrap();
    Spi::run("INSERT INTO queen.log_consumers (partition_id, consumer_group) SELECT id, 'g' FROM queen.log_partitions").unwrap();
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_pop_v1('q', 'Default', 'g', 5, 30, 'w')"), 0);
    assert_eq!(cursor("q", "g"), "2|-|-|0|-|0|0");
}

#[pg_test]
fn pop_after_retention_gap_starts_at_first_remaining_segment() {
    push_n("q", "Default", "a", 2);
    push_n("q", "Default", "b", 2);
    Spi::run("DELETE FROM queen.log_segments WHERE base_offset = 0").unwrap();
    Spi::run("INSERT INTO queen.log_consumers (partition_id, consumer_group) SELECT id, 'g' FROM queen.log_partitions").unwrap();
    assert_eq!(lease("q", "g", "w", 5), Some((2, 3)));
}

#[pg_test]
fn queue_pop_serves_ready_partitions_and_registers_group() {
    push_n("q", "p1", "a", 2);
    push_n("q", "p2", "b", 2);
    let parts = text_of("SELECT string_agg(DISTINCT r_partition, ',') FROM queen.log_pop_queue_v1('q', 'g', 10, 30, 'w', p_max_partitions => 2)");
    assert_eq!(parts.unwrap(), "p1,p2");
    assert_eq!(i64_of("SELECT count(*) FROM queen.consumer_groups_metadata WHERE consumer_group = 'g'"), 1);
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_pop_queue_v1('q', 'g', 10, 30, 'w2')"), 0, "both leased");
    // One partition per pop by default, and the budget is a global cap.
    let n = i64_of("SELECT count(DISTINCT r_partition) FROM queen.log_pop_queue_v1('q', 'h', 10, 30, 'w3')");
    assert_eq!(n, 1);
}

#[pg_test]
fn queue_pop_new_group_registers_and_skips_history() {
    push_n("q", "p1", "a", 2);
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_pop_queue_v1('q', 'g', 10, 30, 'w', false, 'new')"), 0);
    push_n("q", "p1", "b", 1);
    let txn = text_of("SELECT r_transaction_id FROM queen.pop('q', NULL, 'g', 10)");
    assert_eq!(txn.unwrap(), "b0");
}

#[pg_test]
fn native_push_pop_ack_round_trip() {
    j("SELECT queen.push('q', '[{\"a\":1}, null, \"s\"]'::jsonb, ARRAY['t1','t2','t3'])");
    let rows = text_of("SELECT string_agg(r_offset || '=' || r_payload::text || '@' || r_transaction_id, ',' ORDER BY r_offset) FROM queen.pop('q', 'Default', p_batch => 3)");
    assert_eq!(rows.unwrap(), "0={\"a\": 1}@t1,1=null@t2,2=\"s\"@t3");
    let lease_id = text_of("SELECT worker_id FROM queen.log_leases").unwrap();
    let r = j(&format!("SELECT queen.ack((SELECT id FROM queen.log_partitions), '{lease_id}', ARRAY['t1','t2','t3'])"));
    assert_eq!((r["ok"].as_bool(), r["acked"].as_i64(), r["leaseReleased"].as_bool()), (Some(true), Some(3), Some(true)));
}

#[pg_test]
fn push_refuses_a_blob_that_does_not_match_its_count_and_hashes() {
    push_n("q", "Default", "x", 1);
    let before = table_counts();
    let push = |count: i32, hashes: &str, blob: &str| {
        sqlstate_of(&format!("SELECT queen.log_push_one_v1('q', 'Default', {count}, {hashes}, -1, {blob})"))
    };
    // Not a segment at all; fewer frames than msg_count; a frame whose hash is another's.
    assert!(push(1, "queen.xxh3_128('a')", "'\\x00'::bytea").starts_with("22023: QPUSH bad segment blob: corrupt segment"));
    assert_eq!(push(2, "queen.xxh3_128('a') || queen.xxh3_128('b')", &seg(&["a"])),
               "22023: QPUSH bad segment blob: corrupt segment: 1 frames where 2 are expected");
    assert_eq!(push(1, "queen.xxh3_128('b')", &seg(&["a"])),
               "22023: QPUSH bad segment blob: corrupt segment: frame 0 transactionId does not match its sidecar hash");
    let wire = format!("{{\"pushes\":[{{\"queue\":\"q\",\"partition\":\"Default\",\"count\":1,\"hashesHex\":\"{}\",\"blobB64\":\"AA==\"}}]}}",
                       text_of("SELECT queen.xxh3_128_hex('a')").unwrap());
    assert!(sqlstate_of(&format!("SELECT queen.log_transaction_wire_v1('{wire}'::jsonb)")).starts_with("22023: QPUSH bad segment blob"));
    assert_eq!(table_counts(), before, "nothing written");
}

#[pg_test]
fn a_pop_that_only_leases_writes_no_wal_and_an_ack_updates_its_cursor_hot() {
    push_n("q", "Default", "t", 6);
    // The insert LSN is global and other tests write WAL concurrently, so a lease is
    // proven WAL-free when one of several leases (one per group) left it unmoved; a
    // lease that wrote WAL would move it every time.
    let lsn = || text_of("SELECT pg_current_wal_insert_lsn()::text").unwrap();
    let mut quiet = 0;
    for k in 0..8 {
        let g = format!("g{k}");
        lease("q", &g, "w", 2); // first contact creates the cursor (logged, once)
        ack_hash("q", &g, "w", &["t0", "t1"], None);
        let before = lsn();
        assert_eq!(lease("q", &g, "w2", 2), Some((2, 3)));
        quiet += usize::from(lsn() == before);
        ack_hash("q", &g, "w2", &["t2", "t3"], None);
        assert_ne!(lsn(), before, "the ack's cursor commit is logged");
    }
    assert!(quiet > 0, "leasing wrote no WAL record (log_leases is unlogged)");
    let (upd, hot) = (
        i64_of("SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'log_consumers'"),
        i64_of("SELECT n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = 'log_consumers'"),
    );
    assert!(upd >= 2 && hot == upd, "every cursor update is HOT: {hot} of {upd}");
}

#[pg_test]
fn a_cursor_whose_lease_row_was_lost_is_served_and_acked_again() {
    // A crash or a failover empties the unlogged lease table; the cursors stay.
    push_n("q", "Default", "t", 3);
    lease("q", "g", "w", 2);
    ack_hash("q", "g", "w", &["t0"], None);
    lease("q", "h", "w", 3);
    Spi::run("DELETE FROM queen.log_leases").unwrap();
    let pid = pid_of("q", "Default");
    // The old lease is void: an ack with its id is refused, nothing lost.
    assert_eq!(ack_hash("q", "g", "w", &["t1"], None)["error"], "invalid or expired lease");
    assert_eq!(cursor("q", "g"), "0|-|-|0|-|0|1");
    // The batch redelivers as a first delivery, and acks go on.
    assert_eq!(lease("q", "g", "w2", 5), Some((1, 2)));
    assert_eq!(ack_hash("q", "g", "w2", &["t1", "t2"], None)["acked"], 2);
    // A lease-less ack and a queue-level pop work on a cursor without a lease row too.
    Spi::run("DELETE FROM queen.log_leases").unwrap();
    assert_eq!(ack_hash("q", "h", "", &["t0"], None)["acked"], 1);
    Spi::run("DELETE FROM queen.log_leases").unwrap();
    let served = text_of("SELECT string_agg(r_offset::text, ',' ORDER BY r_offset) FROM queen.pop('q', p_group => 'h', p_batch => 10)");
    assert_eq!(served.as_deref(), Some("1,2"), "{}", text_of("SELECT string_agg(l::text, ' ') FROM queen.consumer_lag l").unwrap_or_default());
    assert_eq!(text_of(&format!("SELECT string_agg(consumer_group, ',') FROM queen.log_leases WHERE partition_id = '{pid}'")),
               Some("h".into()), "the lease row is recreated where it is used");
}
