// #[pg_test]s for the delivery features: delayedProcessing, nack with delay, DLQ redrive and delete,
// lag and queue statistics. Time is moved by ageing rows (as the lifecycle tests do),
// never waited for.

/// A pop's served offsets, "a,b,c" ascending ("" when nothing was served). `sql` is a
/// table pop returning r_base, r_start_idx, r_take (log_pop_v1, log_pop_queue_v1,
/// broker_pop_v1) or r_offset (queen.pop).
fn served(sql: &str) -> String {
    let q = if sql.contains("queen.pop(") {
        format!("SELECT string_agg(r_offset::text, ',' ORDER BY r_offset) FROM ({sql}) x")
    } else {
        format!(
            "SELECT string_agg(o::text, ',' ORDER BY o) FROM ({sql}) x,
                    generate_series(x.r_base + x.r_start_idx, x.r_base + x.r_start_idx + x.r_take - 1) o"
        )
    };
    text_of(&q).unwrap_or_default()
}

/// Every pop variant of queue `q` for group `g` (a variant's own suffix keeps each one a
/// fresh cursor when `fresh`): partition and queue level, leasing and auto-ack, the
/// contract's, the broker's and the psql helper.
fn pop_variants(q: &str, g: &str, fresh: bool) -> Vec<(String, String)> {
    let grp = |i: usize| if fresh { format!("{g}{i}") } else { g.to_string() };
    vec![
        format!("SELECT * FROM queen.log_pop_v1('{q}', 'Default', '{}', 10, 30, 'w1')", grp(1)),
        format!("SELECT * FROM queen.log_pop_v1('{q}', 'Default', '{}', 10, 30, '', true)", grp(2)),
        format!("SELECT * FROM queen.log_pop_queue_v1('{q}', '{}', 10, 30, 'w3')", grp(3)),
        format!("SELECT * FROM queen.broker_pop_v1(NULL, '{q}', 'Default', '{}', 10, NULL, 'w4')", grp(4)),
        format!("SELECT * FROM queen.broker_pop_v1(NULL, '{q}', NULL, '{}', 10, NULL, 'w5', p_max_partitions => 4)", grp(5)),
        format!("SELECT * FROM queen.pop('{q}', 'Default', '{}', 10)", grp(6)),
        format!("SELECT * FROM queen.pop('{q}', p_group => '{}', p_batch => 10)", grp(7)),
    ]
    .into_iter()
    .map(|sql| (sql.clone(), sql))
    .collect()
}

fn configure(q: &str, options: &str) {
    j(&format!("SELECT queen.configure_queue_v1('{q}', NULL, NULL, '{options}')"));
}

#[pg_test]
fn a_delayed_message_is_not_delivered_early_by_any_pop_variant() {
    configure("dq", r#"{"delayedProcessing": 60}"#);
    assert_eq!(i64_of("SELECT delayed_processing FROM queen.queues WHERE name = 'dq'"), 60);
    push_n("dq", "Default", "t", 3);
    let mut variants = pop_variants("dq", "g", true);
    variants.push(("queue mode".into(), "SELECT * FROM queen.log_pop_queue_v1('dq', NULL, 10, 30, 'wq')".into()));
    for (name, sql) in &variants {
        assert_eq!(served(sql), "", "{name} served a message before its delay");
    }
    // Nothing was leased, consumed or sealed over the deferred messages.
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_consumers WHERE committed <> -1 OR total_consumed <> 0"), 0);
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_leases WHERE worker_id IS NOT NULL"), 0);
    age("dq", 61);
    for (name, sql) in &variants {
        assert_eq!(served(sql), "0,1,2", "{name} once the delay passed");
    }
}

#[pg_test]
fn a_young_segment_stops_the_pop_head_of_line_and_order_is_kept() {
    configure("dq", r#"{"delayedProcessing": 60}"#);
    push_n("dq", "Default", "a", 2);
    age("dq", 61);
    push_n("dq", "Default", "b", 2);
    let pop = "SELECT * FROM queen.log_pop_v1('dq', 'Default', 'g', 10, 30, 'w')";
    assert_eq!(served(pop), "0,1", "the visible segment, and nothing behind the young one");
    assert_eq!(ack_hash("dq", "g", "w", &["a0", "a1"], None)["acked"], 2);
    assert_eq!(served(pop), "", "deferred");
    assert_eq!(cursor("dq", "g"), "1|-|-|0|-|0|2", "a deferred partition is not sealed past its messages");
    // A group's first contact creates its cursor without the claim's visibility check:
    // the serve itself must tell deferred from empty, or the seal would skip them all.
    push_n("dq", "young", "y", 2);
    assert_eq!(served("SELECT * FROM queen.log_pop_v1('dq', 'young', 'late', 10, 30, 'w2')"), "");
    assert_eq!(i64_of("SELECT c.committed FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id
                        WHERE p.name = 'young' AND c.consumer_group = 'late'"), -1);
    age("dq", 61);
    assert_eq!(served(pop), "2,3");
    assert_eq!(served("SELECT * FROM queen.log_pop_v1('dq', 'young', 'late', 10, 30, 'w2')"), "0,1");
}

#[pg_test]
fn deferred_partitions_do_not_starve_a_ready_one_in_queue_level_pops() {
    configure("dq", r#"{"delayedProcessing": 60}"#);
    // Twenty partitions that sort first (never leased, lowest ids) hold young messages;
    // the one ready partition sorts last, beyond the candidate list of a 1-partition pop.
    let qid = text_of("SELECT id::text FROM queen.queues WHERE name = 'dq'").unwrap();
    let partition = |id: &str, name: &str| {
        Spi::run(&format!("INSERT INTO queen.partition_names (id, queue_id, name) VALUES ('{id}', '{qid}', '{name}');
                           INSERT INTO queen.log_partitions (id, queue_id, name) VALUES ('{id}', '{qid}', '{name}')")).unwrap();
    };
    for i in 1..=20 {
        partition(&format!("00000000-0000-0000-0000-{i:012}"), &format!("young{i}"));
    }
    partition("ffffffff-ffff-ffff-ffff-ffffffffffff", "ready");
    push_n("dq", "ready", "r", 1);
    age("dq", 61);
    for i in 1..=20 {
        push_n("dq", &format!("young{i}"), "y", 1);
    }
    let got = text_of("SELECT string_agg(r_partition || ':' || r_base, ',')
                         FROM queen.log_pop_queue_v1('dq', 'g', 1, 30, 'w')");
    assert_eq!(got.as_deref(), Some("ready:0"));
}

#[pg_test]
fn configure_stores_delayed_processing_and_refuses_a_negative_one() {
    configure("dq", r#"{"delayedProcessing": 5}"#);
    configure("dq", r#"{"leaseTime": 9}"#);
    assert_eq!(i64_of("SELECT delayed_processing FROM queen.queues WHERE name = 'dq'"), 5, "kept when absent");
    let before = table_counts();
    let e = sqlstate_of("SELECT queen.configure_queue_v1('dq', NULL, NULL, '{\"delayedProcessing\": -1}')");
    assert!(e.starts_with("22023"), "{e}");
    assert_eq!(table_counts(), before);
    configure("dq", r#"{"delayedProcessing": 0}"#);
    assert_eq!(i64_of("SELECT delayed_processing FROM queen.queues WHERE name = 'dq'"), 0);
}

/// log_ack_by_hash_delay_v1 on partition Default of `queue`.
fn delay_nack(queue: &str, group: &str, worker: &str, txns: &[&str], statuses: &[&str], delay: &str) -> Value {
    let hs: Vec<String> = txns.iter().map(|t| h(t)).collect();
    let st: Vec<String> = statuses.iter().map(|s| format!("'{s}'")).collect();
    let w = if worker.is_empty() { "NULL".to_string() } else { format!("'{worker}'") };
    j(&format!(
        "SELECT queen.log_ack_by_hash_delay_v1('{}'::uuid, '{group}', {w}, ARRAY[{}]::bytea[], ARRAY[{}]::text[], {delay})",
        pid_of(queue, "Default"),
        hs.join(","),
        st.join(",")
    ))
}

/// The nack delay of every cursor of the group has passed.
fn pass_the_hold(group: &str) {
    Spi::run(&format!("UPDATE queen.log_consumers SET redeliver_at = clock_timestamp() - interval '1 s'
                        WHERE consumer_group = '{group}'")).unwrap();
}

#[pg_test]
fn a_nack_with_delay_redelivers_after_not_before_and_only_failed_spends_the_budget() {
    leased_batch(2);
    let r = delay_nack("q", "g", "w", &["t0"], &["failed"], "60");
    assert_eq!((r["ok"].as_bool(), r["leaseReleased"].as_bool(), r["off"].as_i64()), (Some(true), Some(true), Some(-1)), "{r}");
    assert!(r["redeliverAt"].as_str().is_some_and(|t| t.ends_with('Z')), "{r}");
    assert_eq!(cursor("q", "g"), "-1|-|-|1|0|1|0", "failed charged the budget once");
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_consumers WHERE redeliver_at > clock_timestamp() + interval '59 s'"), 1,
               "held in the durable cursor row");
    for (name, sql) in pop_variants("q", "g", false) {
        assert_eq!(served(&sql), "", "{name} redelivered before the delay");
    }
    pass_the_hold("g");
    assert_eq!(lease("q", "g", "w2", 2), Some((0, 1)), "redelivered once the delay passed");
    assert_eq!(cursor("q", "g"), "-1|1|w2|1|0|2|0", "attempt 2");
    let r = delay_nack("q", "g", "w2", &["t0", "t1"], &["retry", "retry"], "60");
    assert!(r["redeliverAt"].is_string(), "{r}");
    assert_eq!(cursor("q", "g"), "-1|-|-|1|0|2|0", "retry leaves the budget alone");
    assert_eq!(served("SELECT * FROM queen.log_pop_v1('q', 'Default', 'g', 10, 30, 'w3')"), "");
    pass_the_hold("g");
    assert_eq!(served("SELECT * FROM queen.log_pop_v1('q', 'Default', 'g', 10, 30, 'w3')"), "0,1");
    assert_eq!(cursor("q", "g"), "-1|1|w3|1|0|3|0");
}

#[pg_test]
fn a_nack_delay_holds_only_its_partition_and_group() {
    leased_batch(2);
    push_n("q", "B", "b", 2);
    push_n("q", "C", "c", 2);
    delay_nack("q", "g", "w", &["t0"], &["failed"], "600");
    assert_eq!(served("SELECT * FROM queen.log_pop_v1('q', 'B', 'g', 10, 30, 'w1')"), "0,1", "another partition");
    assert_eq!(served("SELECT * FROM queen.log_pop_v1('q', 'Default', 'h', 10, 30, 'w2')"), "0,1", "another group");
    let queue_level = text_of("SELECT string_agg(DISTINCT r_partition, ',')
                                 FROM queen.log_pop_queue_v1('q', 'g', 10, 30, 'w3', p_max_partitions => 5)");
    assert_eq!(queue_level.as_deref(), Some("C"), "a queue-level pop skips the held partition");
}

#[pg_test]
fn a_nack_delay_is_ignored_where_nothing_is_redelivered() {
    leased_batch(2);
    let r = delay_nack("q", "g", "w", &["t0", "t1"], &["completed", "completed"], "60");
    assert!(r.get("redeliverAt").is_none(), "completion: {r}");
    push_n("q", "Default", "u", 2);
    let r = delay_nack("q", "g", "", &["u0"], &["failed"], "60");
    assert!(r.get("redeliverAt").is_none(), "lease-less: signals do not act: {r}");
    lease("q", "g", "w2", 1);
    Spi::run("UPDATE queen.queues SET retry_limit = 0").unwrap();
    let r = delay_nack("q", "g", "w2", &["u0"], &["failed"], "60");
    assert_eq!(r["dlq"], true, "{r}");
    assert!(r.get("redeliverAt").is_none(), "a dlq hand-off: {r}");
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_consumers WHERE redeliver_at IS NOT NULL"), 0);
}

#[pg_test]
fn a_nack_delay_of_zero_or_null_is_the_plain_ack_and_a_negative_one_is_refused() {
    leased_batch(2);
    let before = table_counts();
    let e = sqlstate_of(&format!(
        "SELECT queen.log_ack_by_hash_delay_v1('{}', 'g', 'w', ARRAY[{}], ARRAY['failed'], -1)",
        pid_of("q", "Default"), h("t0")));
    assert!(e.starts_with("22023"), "{e}");
    assert_eq!(table_counts(), before);
    let r = delay_nack("q", "g", "w", &["t0"], &["failed"], "NULL");
    assert!(r.get("redeliverAt").is_none(), "{r}");
    assert_eq!(lease("q", "g", "w2", 2), Some((0, 1)), "no hold");
    let r = delay_nack("q", "g", "w2", &["t0"], &["failed"], "0");
    assert!(r.get("redeliverAt").is_none(), "{r}");
}

/// Push `n` messages to queue `q`, lease them to group `g` and dead-letter offset 0 with
/// error `why`: returns the DLQ row id.
fn dead_letter(q: &str, g: &str, why: &str) -> String {
    let pid = pid_of(q, "Default");
    let w = format!("w-{g}");
    lease(q, g, &w, 10).expect("leased");
    let r = ack_hash(q, g, &w, &[&format!("{q}-0")], Some(&["dlq"]));
    assert_eq!(r["dlq"], true, "{r}");
    let filed = j(&format!("SELECT queen.log_dlq_head_v1('{pid}', '{g}', '{w}', 0, NULL, NULL, NULL, '{why}')"));
    filed["id"].as_str().expect("filed").to_string()
}

#[pg_test]
fn redrive_makes_a_row_deliverable_again_exactly_once_and_removes_it_in_the_same_transaction() {
    push_n("r", "Default", "r-", 2);
    let id = dead_letter("r", "g", "boom");
    let pid = pid_of("r", "Default");
    // Inside a transaction that rolls back, the push and the removal go together.
    Spi::run(&format!("DO $$ BEGIN PERFORM queen.dlq_redrive_v1(ARRAY['{id}']::uuid[]);
                         RAISE EXCEPTION 'undo' USING ERRCODE = 'QA001';
                       EXCEPTION WHEN SQLSTATE 'QA001' THEN NULL; END $$")).unwrap();
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_dlq"), 1);
    assert_eq!(i64_of("SELECT last_offset FROM queen.log_partitions"), 1);
    let r = j(&format!("SELECT queen.dlq_redrive_v1(ARRAY['{id}']::uuid[])"));
    assert_eq!(r["moved"], 1, "{r}");
    let row = &r["results"][0];
    assert_eq!((row["result"].as_str(), row["offset"].as_i64(), row["originalOffset"].as_i64()),
               (Some("moved"), Some(2), Some(0)), "{r}");
    let txn = format!("dlq:{id}:r-0");
    assert_eq!(row["transactionId"], txn.as_str());
    assert_eq!((row["queue"].as_str(), row["partitionId"].as_str(), row["consumerGroup"].as_str(),
                row["originalTransactionId"].as_str()), (Some("r"), Some(pid.as_str()), Some("g"), Some("r-0")));
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_dlq"), 0, "removed");
    // The new message is the old one's payload under the redrive transactionId.
    let fresh = "SELECT r_offset, r_transaction_id, r_payload FROM queen.pop('r', 'Default', 'g', 10)";
    assert_eq!(text_of(&format!("SELECT string_agg(concat_ws('|', r_offset, r_transaction_id, r_payload), ',' ORDER BY r_offset) FROM ({fresh}) x")),
               Some(format!("1|r-1|{{\"n\": 1}},2|{txn}|{{\"n\": 0}}")));
    assert_eq!(row["messageId"].as_str(), text_of("SELECT d.message_id::text FROM queen.log_segments s, queen.decode_segment_v1(s.blob) d WHERE s.base_offset = 2").as_deref());
    // Exactly once: a second redrive finds nothing, and nothing more is delivered.
    let again = j(&format!("SELECT queen.dlq_redrive_v1(ARRAY['{id}']::uuid[])"));
    assert_eq!((again["moved"].as_i64(), again["results"][0]["result"].as_str()), (Some(0), Some("gone")));
    assert_eq!(i64_of("SELECT last_offset FROM queen.log_partitions"), 2);
    assert_eq!(served("SELECT * FROM queen.log_pop_v1('r', 'Default', 'other', 10, 30, 'w9')"), "0,1,2",
               "another group sees the log once: the original and the redriven copy");
}

#[pg_test]
fn rows_of_one_message_filed_by_several_groups_go_back_as_one_message() {
    push_n("r", "Default", "r-", 1);
    let a = dead_letter("r", "ga", "a");
    let b = dead_letter("r", "gb", "b");
    let r = j(&format!("SELECT queen.dlq_redrive_v1(ARRAY['{b}', '{a}']::uuid[])"));
    assert_eq!(r["moved"], 2, "{r}");
    assert_eq!(r["results"][0]["messageId"], r["results"][1]["messageId"], "{r}");
    assert_eq!(r["results"][0]["transactionId"], format!("dlq:{b}:r-0").as_str(), "the first row names it");
    assert_eq!(i64_of("SELECT last_offset FROM queen.log_partitions"), 1, "one new message");
    for g in ["ga", "gb"] {
        assert_eq!(served(&format!("SELECT * FROM queen.log_pop_v1('r', 'Default', '{g}', 10, 30, 'x{g}')")), "1", "{g}");
    }
}

#[pg_test]
fn redrive_after_retention_uses_the_snapshot_and_refuses_a_row_without_one() {
    push_n("r", "Default", "r-", 2);
    let id = dead_letter("r", "g", "boom");
    Spi::run("UPDATE queen.log_dlq SET payload = '{\"from\": \"snapshot\"}'").unwrap();
    // Retention took the segment: the snapshot is all that is left.
    Spi::run("DELETE FROM queen.log_segments; UPDATE queen.log_partitions SET log_start = 2").unwrap();
    let r = j(&format!("SELECT queen.dlq_redrive_v1(ARRAY['{id}']::uuid[])"));
    assert_eq!(r["results"][0]["result"], "moved", "{r}");
    assert_eq!(text_of("SELECT r_payload::text FROM queen.pop('r', 'Default', 'h', 10)").as_deref(),
               Some(r#"{"from": "snapshot"}"#));
    // A row whose payload was never captured and whose segment is gone stays.
    push_n("r", "Default", "s-", 1);
    Spi::run("INSERT INTO queen.log_dlq (id, partition_id, consumer_group, \"offset\", transaction_id)
              SELECT '00000000-0000-0000-0000-0000000000aa', id, 'g', 0, 'r-0' FROM queen.log_partitions").unwrap();
    let before = table_counts();
    let r = j("SELECT queen.dlq_redrive_v1(ARRAY['00000000-0000-0000-0000-0000000000aa']::uuid[])");
    assert_eq!((r["moved"].as_i64(), r["results"][0]["result"].as_str()), (Some(0), Some("refused")), "{r}");
    assert!(r["results"][0]["error"].as_str().unwrap().contains("payload not captured"), "{r}");
    assert_eq!(table_counts(), before);
}

#[pg_test]
fn redrive_into_a_window_that_holds_the_redrive_transaction_id_is_a_duplicate_and_keeps_the_row() {
    push_n("r", "Default", "r-", 1);
    let id = dead_letter("r", "g", "boom");
    push_n("r", "Default", &format!("dlq:{id}:r-"), 1); // someone pushed that id already
    let r = j(&format!("SELECT queen.dlq_redrive_v1(ARRAY['{id}']::uuid[])"));
    assert_eq!((r["moved"].as_i64(), r["results"][0]["result"].as_str()), (Some(0), Some("duplicate")), "{r}");
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_dlq"), 1);
}

#[pg_test]
fn redrive_and_delete_of_another_tenants_rows_behave_as_if_they_did_not_exist() {
    push_n("r", "Default", "r-", 1);
    let id = dead_letter("r", "g", "boom");
    let other = "'00000000-0000-0000-0000-0000000000bb'";
    let before = table_counts();
    let r = j(&format!("SELECT queen.dlq_redrive_v1(ARRAY['{id}']::uuid[], {other})"));
    assert_eq!(r, serde_json::json!({"moved": 0, "results": [{"dlqId": id, "result": "gone", "queue": null,
        "partition": null, "partitionId": null, "consumerGroup": null, "originalOffset": null,
        "originalTransactionId": null, "messageId": null, "transactionId": null, "offset": null, "error": null}]}));
    assert_eq!(j(&format!("SELECT queen.dlq_delete_v1(ARRAY['{id}']::uuid[], {other})")), serde_json::json!({"deleted": 0, "ids": []}));
    assert_eq!(j(&format!("SELECT queen.dlq_redrive_queue_v1('r', NULL, 10, {other})"))["results"], serde_json::json!([]));
    assert_eq!(j(&format!("SELECT queen.dlq_delete_queue_v1('r', NULL, NULL, {other})"))["deleted"], 0);
    let pid = pid_of("r", "Default");
    assert_eq!(text_of(&format!("SELECT queen.dlq_ids_at_v1('{pid}', 'r-0', {other})::text")).as_deref(), Some("{}"));
    assert_eq!(table_counts(), before);
}

#[pg_test]
fn redrive_and_delete_by_queue_and_group_take_the_oldest_failures_first_up_to_the_limit() {
    push_n("r", "Default", "r-", 3);
    let first = dead_letter("r", "g", "1");
    let second = dead_letter("r", "h", "2");
    Spi::run(&format!("UPDATE queen.log_dlq SET failed_at = failed_at - interval '1 h' WHERE id = '{second}'")).unwrap();
    let pid = pid_of("r", "Default");
    assert_eq!(text_of(&format!("SELECT queen.dlq_ids_at_v1('{pid}', 'r-0')::text")),
               Some(format!("{{{first},{second}}}")), "newest failure first");
    let r = j("SELECT queen.dlq_redrive_queue_v1('r', NULL, 1)");
    assert_eq!(r["results"][0]["dlqId"], second.as_str(), "oldest failure first: {r}");
    assert_eq!(j("SELECT queen.dlq_redrive_queue_v1('r', 'nobody', 5)")["results"], serde_json::json!([]));
    assert!(sqlstate_of("SELECT queen.dlq_redrive_queue_v1('r', NULL, 0)").starts_with("22023"));
    assert!(sqlstate_of("SELECT queen.dlq_redrive_queue_v1(NULL, NULL, 1)").starts_with("22004"));
    assert!(sqlstate_of("SELECT queen.dlq_redrive_v1(ARRAY[NULL]::uuid[])").starts_with("22004"));
    let d = j("SELECT queen.dlq_delete_queue_v1('r', 'g', 1)");
    assert_eq!(d, serde_json::json!({"deleted": 1, "ids": [first]}));
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_dlq"), 0);
    assert!(sqlstate_of("SELECT queen.dlq_delete_queue_v1('r', NULL, 0)").starts_with("22023"));
}

#[pg_test]
fn redrive_and_delete_results_have_their_wire_shape() {
    push_n("r", "Default", "r-", 2);
    let id = dead_letter("r", "g", "boom");
    same_shape::<wire::Redriven>(&j(&format!("SELECT queen.dlq_redrive_v1(ARRAY['{id}', '{id}']::uuid[])")));
    let other = dead_letter("r", "h", "boom");
    same_shape::<wire::DlqDeleted>(&j(&format!("SELECT queen.dlq_delete_v1(ARRAY['{other}']::uuid[])")));
    lease("r", "k", "wk", 1);
    let held = delay_nack("r", "k", "wk", &["r-0"], &["failed"], "5");
    same_shape::<wire::Reply<wire::HashAck>>(&held);
}

/// The stats rows of queue `q` as "partition|group|committed|lag|leased|leased_messages|
/// retries|total|dlq|held|has_oldest", one per line.
fn stats_rows(q: &str) -> String {
    text_of(&format!(
        "SELECT string_agg(concat_ws('|', r_partition, coalesce(r_consumer_group, '-'), coalesce(r_committed::text, '-'),
                                     coalesce(r_lag::text, '-'), r_leased, r_leased_messages, coalesce(r_retries::text, '-'),
                                     coalesce(r_total_consumed::text, '-'), r_dlq, r_redeliver_at IS NOT NULL,
                                     r_oldest_unconsumed_at IS NOT NULL), E'\\n'
                          ORDER BY r_partition, r_consumer_group COLLATE \"C\")
           FROM queen.queue_stats_v1(p_queue => '{q}')"
    ))
    .unwrap_or_default()
}

#[pg_test]
fn stats_agree_with_a_count_by_hand_over_several_groups() {
    configure("s", r#"{"retryLimit": 1}"#);
    push_n("s", "Default", "t", 10);
    push_n("s", "B", "b", 4);
    let qid = text_of("SELECT id::text FROM queen.queues WHERE name = 's'").unwrap();
    Spi::run(&format!("SELECT queen.provision_partition('{qid}', 'E')")).unwrap();
    let pop = |p: &str, g: &str, n: i32, w: &str| {
        served(&format!("SELECT * FROM queen.log_pop_v1('s', '{p}', '{g}', {n}, 60, '{w}')"))
    };
    // Queue mode on Default: 3 consumed, 2 more leased now.
    assert_eq!(pop("Default", "__QUEUE_MODE__", 3, "wq1"), "0,1,2");
    ack_hash("s", "__QUEUE_MODE__", "wq1", &["t0", "t1", "t2"], None);
    assert_eq!(pop("Default", "__QUEUE_MODE__", 2, "wq2"), "3,4");
    // g1: 6 consumed on Default, all of B.
    assert_eq!(pop("Default", "g1", 6, "w1"), "0,1,2,3,4,5");
    ack_hash("s", "g1", "w1", &["t5"], None);
    assert_eq!(pop("B", "g1", 10, "w1b"), "0,1,2,3");
    j(&format!("SELECT queen.log_ack_at_v1('{}', 'g1', 'w1b', 3)", pid_of("s", "B")));
    // g2: t0 fails twice (retryLimit 1) and is dead-lettered; on B a nack with delay.
    assert_eq!(pop("Default", "g2", 1, "w2"), "0");
    ack_hash("s", "g2", "w2", &["t0"], Some(&["failed"]));
    assert_eq!(pop("Default", "g2", 1, "w2b"), "0");
    assert_eq!(ack_hash("s", "g2", "w2b", &["t0"], Some(&["failed"]))["dlq"], true);
    j(&format!("SELECT queen.log_dlq_head_v1('{}', 'g2', 'w2b', 0, NULL, NULL, NULL, 'x')", pid_of("s", "Default")));
    assert_eq!(pop("B", "g2", 2, "w2c"), "0,1");
    j(&format!("SELECT queen.log_ack_by_hash_delay_v1('{}', 'g2', 'w2c', ARRAY[{}], ARRAY['failed'], 60)",
               pid_of("s", "B"), h("b0")));
    // By hand: Default has offsets 0..9; B 0..3; E none.
    assert_eq!(stats_rows("s"), "\
B|g1|3|0|f|0|0|4|0|f|f
B|g2|-1|4|f|0|1|0|0|t|t
Default|__QUEUE_MODE__|2|7|t|2|0|3|0|f|t
Default|g1|5|4|f|0|0|6|0|f|t
Default|g2|0|9|f|0|0|1|1|f|t
E|-|-|-|f|0|-|-|0|f|f");
    // The oldest unconsumed message is the segment holding committed + 1.
    assert_eq!(i64_of("SELECT count(*) FROM queen.queue_stats_v1(p_queue => 's') s
                        JOIN queen.log_segments g ON g.partition_id = s.r_partition_id
                         AND g.base_offset <= s.r_committed + 1 AND g.end_offset >= s.r_committed + 1
                       WHERE s.r_oldest_unconsumed_at = g.created_at AND s.r_oldest_unconsumed_age >= 0"), 4);
    assert_eq!(text_of("SELECT r_worker FROM queen.queue_stats_v1(p_queue => 's') WHERE r_leased").as_deref(), Some("wq2"));
    assert_eq!(i64_of("SELECT count(*) FROM queen.queue_stats_v1(p_queue => 's') WHERE r_queue_id IS NULL OR r_last_offset IS NULL"), 0);
    // Another tenant sees nothing of it; the queue list has the settings.
    assert_eq!(i64_of("SELECT count(*) FROM queen.queue_stats_v1('00000000-0000-0000-0000-0000000000bb', 's')"), 0);
    assert_eq!(text_of("SELECT concat_ws('|', r_queue, r_retry_limit, r_delayed_processing, r_options->>'retryLimit')
                          FROM queen.queue_list_v1(p_queue => 's')").as_deref(), Some("s|1|0|1"));
}

#[pg_test]
fn deleting_a_consumer_group_removes_its_cursors_and_records_and_refuses_bad_arguments() {
    push_n("cg", "Default", "t", 3);
    lease("cg", "g", "w", 1);
    lease("cg", "other", "w", 1);
    Spi::run("SELECT queen.log_pop_queue_v1('cg', 'g', 1, 30, 'w2')").unwrap();
    let before = table_counts();
    for bad in [
        "SELECT queen.delete_consumer_group_v1(NULL)",
        "SELECT queen.delete_consumer_group_v1('')",
        "SELECT queen.delete_consumer_group_v1('g', 'cg', NULL)",
        "SELECT queen.delete_consumer_group_v1('g', repeat('x', 256))",
    ] {
        assert!(sqlstate_of(bad).starts_with("22023"), "{bad}: {}", sqlstate_of(bad));
    }
    assert_eq!(table_counts(), before, "a refused call changes nothing");
    let v = j("SELECT queen.delete_consumer_group_v1('g', 'cg')");
    assert_eq!(v["deletedPartitions"], 1, "{v}");
    assert_eq!(
        i64_of("SELECT count(*) FROM queen.log_consumers WHERE consumer_group = 'g'")
            + i64_of("SELECT count(*) FROM queen.log_leases WHERE consumer_group = 'g'")
            + i64_of("SELECT count(*) FROM queen.consumer_groups_metadata WHERE consumer_group = 'g'"),
        0
    );
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_consumers WHERE consumer_group = 'other'"), 1);
    // Another tenant's group of the same name is out of reach.
    let other = "'00000000-0000-0000-0000-0000000000aa'";
    let v = j(&format!("SELECT queen.delete_consumer_group_v1('other', NULL, true, {other})"));
    assert_eq!(v["deletedPartitions"], 0, "{v}");
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_consumers WHERE consumer_group = 'other'"), 1);
}

/// Backdate the segment at `base` of queue/partition to `ts`, so seeks by time are exact.
fn backdate(queue: &str, partition: &str, base: i64, ts: &str) {
    Spi::run(&format!(
        "UPDATE queen.log_segments SET created_at = '{ts}'
          WHERE partition_id = '{}' AND base_offset = {base}",
        pid_of(queue, partition)
    ))
    .unwrap();
}

#[pg_test]
fn a_seek_moves_the_cursor_both_ways_counts_what_it_passes_and_voids_the_lease() {
    for (i, day) in ["01", "02", "03"].iter().enumerate() {
        push_n("sk", "Default", &format!("s{i}-"), 2);
        backdate("sk", "Default", 2 * i as i64, &format!("2026-01-{day} 00:00:00+00"));
    }
    assert_eq!(lease("sk", "g", "w", 3), Some((0, 2)));
    // Forward to the end: every unconsumed message is passed over, and counted.
    let v = j("SELECT queen.seek_consumer_group_v1('g', 'sk', NULL, true)");
    assert_eq!((v["skipped"].clone(), v["replayed"].clone(), v["partitionsUpdated"].clone()),
               (6.into(), 0.into(), 1.into()), "{v}");
    assert_eq!(cursor("sk", "g"), "5|-|-|0|-|0|0", "the lease is void, nothing counts as consumed");
    assert_eq!(ack_hash("sk", "g", "w", &["s0-0"], None)["error"], "invalid or expired lease");
    assert_eq!(i64_of("SELECT seek_skipped FROM queen.log_consumers WHERE consumer_group = 'g'"), 6);
    // Back to a time: the first message created at or after it is delivered next.
    let v = j("SELECT queen.seek_consumer_group_v1('g', 'sk', '2026-01-02 00:00:00+00')");
    assert_eq!((v["replayed"].clone(), v["targetTimestamp"].clone()),
               (4.into(), "2026-01-02T00:00:00.000Z".into()), "{v}");
    assert_eq!(lease("sk", "g", "w2", 1), Some((2, 2)));
    // Between two segments: the later one; before everything: the log start.
    j("SELECT queen.seek_consumer_group_v1('g', 'sk', '2026-01-02 12:00:00+00')");
    assert_eq!(lease("sk", "g", "w3", 1), Some((4, 4)));
    j("SELECT queen.seek_consumer_group_v1('g', 'sk', '2000-01-01 00:00:00+00')");
    assert_eq!(cursor("sk", "g"), "-1|-|-|0|-|0|0");
    // One partition: to the end by default (Queen's form), or to a time.
    let v = j("SELECT queen.seek_partition_v1('g', 'sk', 'Default')");
    assert_eq!((v["offset"].clone(), v["skipped"].clone(), v["cursorMovedTo"].clone()),
               (5.into(), 6.into(), "2026-01-03T00:00:00.000Z".into()), "{v}");
    let v = j("SELECT queen.seek_partition_v1('g', 'sk', 'Default', '2026-01-03 00:00:00+00')");
    assert_eq!((v["offset"].clone(), v["replayed"].clone()), (3.into(), 2.into()), "{v}");
    // Clamped to the log start: retention moved it to 2.
    Spi::run(&format!("UPDATE queen.log_partitions SET log_start = 2 WHERE id = '{}'", pid_of("sk", "Default"))).unwrap();
    let v = j("SELECT queen.seek_consumer_group_v1('g', 'sk', '2000-01-01 00:00:00+00')");
    assert_eq!((v["replayed"].clone(), cursor("sk", "g")), (2.into(), "1|-|-|0|-|0|0".into()), "{v}");
}

#[pg_test]
fn a_queue_seek_positions_the_group_on_partitions_it_has_not_read_and_counts_them() {
    push_n("sk2", "Default", "a", 2);
    push_n("sk2", "B", "b", 3);
    assert_eq!(lease("sk2", "g", "w", 10), Some((0, 1)));
    let v = j("SELECT queen.seek_consumer_group_v1('g', 'sk2', NULL, true)");
    // Default: 2 leased, not acked; B: never read, mode 'all' would have read all 3.
    assert_eq!((v["partitionsUpdated"].clone(), v["skipped"].clone()), (2.into(), 5.into()), "{v}");
    assert_eq!(i64_of("SELECT committed FROM queen.log_consumers c
                        WHERE consumer_group = 'g' AND partition_id = (SELECT id FROM queen.log_partitions WHERE name = 'B')"), 2);
    // Another group is untouched.
    assert_eq!(lease("sk2", "other", "w", 10), Some((0, 1)));
}

#[pg_test]
fn a_seek_or_subscription_update_refuses_bad_or_unknown_arguments_and_changes_nothing() {
    push_n("sk3", "Default", "t", 2);
    Spi::run("SELECT queen.log_pop_queue_v1('sk3', 'g', 1, 30, 'w')").unwrap();
    let before = table_counts();
    let other = "'00000000-0000-0000-0000-0000000000aa'";
    for (bad, code) in [
        ("SELECT queen.seek_consumer_group_v1('nope', 'sk3', NULL, true)", "P0002"),
        ("SELECT queen.seek_consumer_group_v1('g', 'nope', NULL, true)", "P0002"),
        (&*format!("SELECT queen.seek_consumer_group_v1('g', 'sk3', NULL, true, {other})"), "P0002"),
        ("SELECT queen.seek_partition_v1('g', 'sk3', 'nope')", "P0002"),
        ("SELECT queen.seek_consumer_group_v1('g', 'sk3')", "22023"),
        ("SELECT queen.seek_consumer_group_v1('g', 'sk3', now() - interval '1 s', true)", "22023"),
        ("SELECT queen.seek_consumer_group_v1('g', 'sk3', clock_timestamp() + interval '1 h')", "22023"),
        ("SELECT queen.seek_consumer_group_v1('', 'sk3', NULL, true)", "22023"),
        ("SELECT queen.seek_consumer_group_v1('g', NULL, NULL, true)", "22004"),
        ("SELECT queen.update_consumer_group_subscription_v1('nope', now())", "P0002"),
        (&*format!("SELECT queen.update_consumer_group_subscription_v1('g', now(), {other})"), "P0002"),
        ("SELECT queen.update_consumer_group_subscription_v1('g', clock_timestamp() + interval '1 h')", "22023"),
        ("SELECT queen.update_consumer_group_subscription_v1('g', NULL)", "22004"),
        ("SELECT queen.update_consumer_group_subscription_v1('', now())", "22023"),
    ] {
        assert!(sqlstate_of(bad).starts_with(code), "{bad}: {}", sqlstate_of(bad));
    }
    assert_eq!(table_counts(), before, "a refused call changes nothing");
}

#[pg_test]
fn a_subscription_update_moves_where_unread_partitions_start_not_the_cursors() {
    push_n("sk4", "Default", "t", 3);
    backdate("sk4", "Default", 0, "2026-01-01 00:00:00+00");
    Spi::run("SELECT queen.log_pop_queue_v1('sk4', 'g', 1, 30, 'w')").unwrap();
    push_n("sk4", "B", "old", 2);
    backdate("sk4", "B", 0, "2026-01-01 00:00:00+00");
    push_n("sk4", "B", "new", 1);
    backdate("sk4", "B", 2, "2026-01-03 00:00:00+00");
    let v = j("SELECT queen.update_consumer_group_subscription_v1('g', '2026-01-02 00:00:00+00')");
    assert_eq!((v["rowsUpdated"].clone(), v["newTimestamp"].clone()),
               (1.into(), "2026-01-02T00:00:00.000Z".into()), "{v}");
    assert_eq!(text_of("SELECT subscription_mode FROM queen.consumer_groups_metadata WHERE consumer_group = 'g'").as_deref(),
               Some("timestamp"), "an 'all' record takes the instant, as Queen reads it");
    // The cursor on Default did not move; B, first contacted now, starts at the instant.
    assert_eq!(i64_of("SELECT committed FROM queen.log_consumers WHERE consumer_group = 'g'"), -1);
    let served = Spi::get_one::<i64>(
        "SELECT min(r_base + r_start_idx) FROM queen.log_pop_v1('sk4', 'B', 'g', 10, 30, 'w2')").unwrap();
    assert_eq!(served, Some(2));
}

#[pg_test]
fn a_message_is_found_by_its_address_in_the_sidecar_below_it_or_not_at_all() {
    push_n("br", "Default", "t", 3);
    let pid = pid_of("br", "Default");
    let m = j(&format!("SELECT queen.get_message_v1('{pid}', 't1')"));
    assert_eq!((m["offset"].clone(), m["payload"].clone(), m["status"].clone()),
               (1.into(), serde_json::json!({"n": 1}), "pending".into()), "{m}");
    // The lifecycle purged the sidecar: the segments below it are decoded instead.
    Spi::run(&format!("DELETE FROM queen.log_txns WHERE partition_id = '{pid}';
                       UPDATE queen.log_partitions SET txns_start = 3 WHERE id = '{pid}'")).unwrap();
    assert_eq!(j(&format!("SELECT queen.get_message_v1('{pid}', 't2')"))["offset"], 2);
    let other = "'00000000-0000-0000-0000-0000000000aa'";
    for bad in [
        format!("SELECT queen.get_message_v1('{pid}', 'nobody')"),
        format!("SELECT queen.get_message_v1('{pid}', 't1', {other})"),
        "SELECT queen.get_message_v1(gen_random_uuid(), 't1')".into(),
    ] {
        assert!(sqlstate_of(&bad).starts_with("P0002"), "{bad}: {}", sqlstate_of(&bad));
    }
    assert!(sqlstate_of(&format!("SELECT queen.get_message_v1('{pid}', NULL)")).starts_with("22004"));
}

#[pg_test]
fn a_listing_refuses_unknown_or_bad_filters_and_reads_only_its_page() {
    push_n("br2", "Default", "t", 5);
    for bad in [
        r#"{"queue": "br2", "colour": "red"}"#,
        r#"{"status": "done"}"#,
        r#"{"limit": -1}"#,
        r#"{"limit": 1001}"#,
        r#"{"offset": "x"}"#,
        r#"{"queue": 7}"#,
        r#"[]"#,
    ] {
        let sql = format!("SELECT queen.list_messages_v1('{bad}')");
        assert!(sqlstate_of(&sql).starts_with("22023"), "{bad}: {}", sqlstate_of(&sql));
    }
    assert!(sqlstate_of(r#"SELECT queen.list_messages_v1('{"from": "soon"}')"#).starts_with("22007"));
    let page = j(r#"SELECT queen.list_messages_v1('{"queue": "br2", "limit": 2, "offset": 1}')"#);
    let offs: Vec<i64> = page["messages"].as_array().unwrap().iter().map(|m| m["offset"].as_i64().unwrap()).collect();
    assert_eq!(offs, [3, 2]);
    assert_eq!(page["mode"]["type"], "none");
    let other = "'00000000-0000-0000-0000-0000000000aa'";
    let foreign = j(&format!(r#"SELECT queen.list_messages_v1('{{"queue": "br2"}}', {other})"#));
    assert_eq!(foreign["messages"], serde_json::json!([]));
}

#[pg_test]
fn a_trace_is_kept_against_its_message_bounded_and_deleted_with_it_by_retention() {
    push_n("tr", "Default", "t", 3);
    let pid = pid_of("tr", "Default");
    let rec = |txn: &str| format!(
        r#"SELECT queen.record_trace_v1('{{"transactionId": "{txn}", "partitionId": "{pid}", "data": {{"k": 1}}, "traceNames": ["n1"]}}')"#);
    assert_eq!(j(&rec("t0"))["success"], true);
    assert_eq!(j(&rec("t2"))["success"], true);
    assert_eq!(i64_of("SELECT \"offset\" FROM queen.log_traces WHERE transaction_id = 't2'"), 2);
    let before = i64_of("SELECT count(*) FROM queen.log_traces");
    for (bad, code) in [
        (rec("nobody"), "P0002"),
        (format!(r#"SELECT queen.record_trace_v1('{{"transactionId": "t0", "partitionId": "{pid}"}}')"#), "22023"),
        (format!(r#"SELECT queen.record_trace_v1('{{"transactionId": "t0", "partitionId": "{pid}", "data": 1, "x": 2}}')"#), "22023"),
        (format!(r#"SELECT queen.record_trace_v1('{{"transactionId": "t0", "partitionId": "{pid}", "data": 1}}', '00000000-0000-0000-0000-0000000000aa')"#), "P0002"),
    ] {
        assert!(sqlstate_of(&bad).starts_with(code), "{bad}: {}", sqlstate_of(&bad));
    }
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_traces"), before, "a refused trace writes nothing");
    assert_eq!(j("SELECT queen.get_traces_by_name_v1('n1')")["total"], 2);
    assert_eq!(j("SELECT queen.get_available_trace_names_v1()")["trace_names"][0]["message_count"], 2);
    // Retention takes the first segment (all three messages): their traces go, counted.
    Spi::run(&format!("UPDATE queen.queues SET retention_seconds = 1;
                       UPDATE queen.log_segments SET created_at = now() - interval '1 hour' WHERE partition_id = '{pid}'")).unwrap();
    let step = j(&format!("SELECT queen.log_retention_step_v1('{pid}', now(), NULL, 10)"));
    assert_eq!((step["messages"].clone(), step["traces"].clone()), (3.into(), 2.into()), "{step}");
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_traces"), 0);
    assert!(sqlstate_of(&rec("t1")).starts_with("P0002"), "a removed message takes no trace");
}

/// queen.iso_ms (SQL) and queen_log::time::iso_ms (the extension's and the broker's) print
/// the same instants the same way: truncated milliseconds, leap days, both epochs, the
/// range's ends.
#[pg_test]
fn iso_ms_in_sql_agrees_with_the_rust_one() {
    for t in [
        "2024-02-29 12:34:56.789999+00",
        "1999-12-31 23:59:59.9995+00",
        "2000-01-01 00:00:00+00",
        "1969-12-31 23:59:59.999001+00",
        "2100-03-01 00:00:00.001+00",
        "0001-01-01 00:00:00+00",
        "9999-12-31 23:59:59.999999+00",
    ] {
        let ts = Spi::get_one::<TimestampWithTimeZone>(&format!("SELECT '{t}'::timestamptz"))
            .unwrap()
            .unwrap();
        let sql = text_of(&format!("SELECT queen.iso_ms('{t}'::timestamptz)")).unwrap();
        assert_eq!(crate::db::iso_ms(ts), sql, "{t}");
    }
}
