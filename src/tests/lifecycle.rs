// #[pg_test]s for the log lifecycle (docs/contract.md §10, §13): one per retention rule, the purge
// clock, the ack fallback for purged hashes, orphan cleanup and the maintenance plan.
// (CALL queen.run_maintenance() commits between steps, so it is tested over psql in
// tests/maintenance.sh, not inside a test transaction.)

/// Age every segment and sidecar row of the queue by `secs` seconds.
fn age(queue: &str, secs: i64) {
    for t in ["log_segments", "log_txns"] {
        Spi::run(&format!(
            "UPDATE queen.{t} x SET created_at = x.created_at - make_interval(secs => {secs})
               FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
              WHERE p.id = x.partition_id AND q.name = '{queue}'"
        ))
        .unwrap();
    }
}

/// The queue's retention policy (a step's cutoffs are clamped to it).
fn policy(queue: &str, retention: i64, completed: i64) {
    j(&format!(
        "SELECT queen.configure_queue_v1('{queue}', NULL, NULL,
           '{{\"retentionSeconds\": {retention}, \"completedRetentionSeconds\": {completed}}}')"
    ));
}

fn retention_step(queue: &str, all: &str, completed: &str, max: i32) -> Value {
    j(&format!(
        "SELECT queen.log_retention_step_v1('{}', {all}, {completed}, {max})",
        pid_of(queue, "Default")
    ))
}

#[pg_test]
fn retention_rule1_deletes_old_unconsumed_data_moves_the_lagging_cursor_and_counts_it() {
    policy("q", 3600, 0);
    push_n("q", "Default", "old", 3);
    push_n("q", "Default", "old2", 2);
    age("q", 7200);
    push_n("q", "Default", "new", 2);
    lease("q", "g", "w", 1); // group g committed nothing yet, holds a lease on offset 0
    let r = retention_step("q", "clock_timestamp() - interval '1 hour'", "NULL", 100);
    assert_eq!(r, serde_json::json!({"deleted": 2, "messages": 5, "expired": 2, "expired_messages": 5,
                                     "new_log_start": 5, "evicted": 5, "traces": 0, "done": true, "clamped": false, "busy": false}));
    assert_eq!(i64_of("SELECT log_start FROM queen.log_partitions"), 5);
    assert_eq!(cursor("q", "g"), "4|-|-|0|-|0|0", "moved to log_start - 1, lease of evicted offsets released");
    assert_eq!(i64_of("SELECT evicted FROM queen.consumer_lag WHERE consumer_group = 'g'"), 5);
    assert_eq!(lease("q", "g", "w2", 10), Some((5, 6)), "the young messages are still delivered");
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_txns"), 3, "the sidecar is purged on its own clock");
}

#[pg_test]
fn retention_rule2_never_deletes_what_a_group_still_needs_and_keeps_a_partly_consumed_segment() {
    policy("q", 0, 3600);
    push_n("q", "Default", "a", 3); // [0, 2]
    push_n("q", "Default", "b", 3); // [3, 5]
    push_n("q", "Default", "c", 3); // [6, 8]
    age("q", 7200);
    lease("q", "fast", "w", 9);
    ack_hash("q", "fast", "w", &["c2"], None);
    lease("q", "slow", "w", 4);
    ack_hash("q", "slow", "w", &["b0"], None); // slow committed 3: [3, 5] only partly consumed
    let cut = "clock_timestamp() - interval '1 hour'";
    let r = retention_step("q", "NULL", cut, 100);
    assert_eq!((r["deleted"].as_i64(), r["expired"].as_i64(), r["evicted"].as_i64()), (Some(1), Some(0), Some(0)), "{r}");
    assert_eq!((r["messages"].as_i64(), r["expired_messages"].as_i64()), (Some(3), Some(0)), "{r}");
    assert_eq!(r["new_log_start"], 3);
    assert_eq!(cursor("q", "slow"), "3|-|-|0|-|0|4", "the slow group is untouched");
    // A group subscribed to the queue without a cursor here yet still needs everything.
    Spi::run("INSERT INTO queen.consumer_groups_metadata (consumer_group, queue_id)
              SELECT 'late', id FROM queen.queues").unwrap();
    ack_hash("q", "slow", "", &["c2"], None);
    assert_eq!(retention_step("q", "NULL", cut, 100)["deleted"], 0);
    // Young segments stay however consumed.
    Spi::run("DELETE FROM queen.consumer_groups_metadata").unwrap();
    assert_eq!(retention_step("q", "NULL", "clock_timestamp() - interval '3 hours'", 100)["deleted"], 0);
    assert_eq!(retention_step("q", "NULL", cut, 100)["deleted"], 2);
    assert_eq!(i64_of("SELECT log_start FROM queen.log_partitions"), 9, "nothing left: last_offset + 1");
}

#[pg_test]
fn retention_rule2_with_no_consumers_deletes_nothing() {
    policy("q", 0, 60);
    push_n("q", "Default", "a", 3);
    age("q", 7200);
    assert_eq!(retention_step("q", "NULL", "clock_timestamp()", 100)["deleted"], 0);
}

#[pg_test]
fn retention_step_is_bounded_by_max_rows() {
    policy("q", 60, 0);
    for i in 0..5 {
        push_n("q", "Default", &format!("s{i}_"), 2);
    }
    age("q", 7200);
    let r = retention_step("q", "clock_timestamp()", "NULL", 2);
    assert_eq!((r["deleted"].as_i64(), r["done"].as_bool(), r["new_log_start"].as_i64()), (Some(2), Some(false), Some(4)));
    let r = retention_step("q", "clock_timestamp()", "NULL", 2);
    assert_eq!(r["new_log_start"], 8);
    let r = retention_step("q", "clock_timestamp()", "NULL", 2);
    assert_eq!((r["deleted"].as_i64(), r["done"].as_bool(), r["new_log_start"].as_i64()), (Some(1), Some(true), Some(10)));
}

#[pg_test]
fn retention_bad_input_is_refused() {
    assert!(sqlstate_of("SELECT queen.log_retention_step_v1(NULL, NULL, NULL, 1)").starts_with("22004"));
    assert!(sqlstate_of("SELECT queen.log_retention_step_v1(gen_random_uuid(), NULL, NULL, 0)").starts_with("22023"));
    assert_eq!(j("SELECT queen.log_retention_step_v1(gen_random_uuid(), clock_timestamp(), NULL, 5)")["done"], true);
}

#[pg_test]
fn retention_cutoffs_are_clamped_to_the_queues_policy_whoever_calls() {
    push_n("q", "Default", "t", 3);
    age("q", 7200);
    lease("q", "g", "w", 1);
    // No policy: neither rule runs, however late the cutoffs asked for.
    let r = retention_step("q", "'infinity'", "'infinity'", 100);
    assert_eq!((r["deleted"].as_i64(), r["clamped"].as_bool()), (Some(0), Some(true)), "{r}");
    // The broker's role asks the same: still nothing.
    let pid = pid_of("q", "Default");
    Spi::run("SET LOCAL ROLE queen_broker").unwrap();
    let r = j(&format!("SELECT queen.log_retention_step_v1('{pid}', 'infinity', NULL, 100)"));
    assert_eq!((r["deleted"].as_i64(), r["clamped"].as_bool()), (Some(0), Some(true)), "{r}");
    Spi::run("RESET ROLE").unwrap();
    // A 3-hour policy: 'infinity' is pulled back to now − 3 h, the 2-hour-old segment stays.
    policy("q", 3 * 3600, 0);
    let r = retention_step("q", "'infinity'", "NULL", 100);
    assert_eq!((r["deleted"].as_i64(), r["clamped"].as_bool()), (Some(0), Some(true)), "{r}");
    // A 1-hour policy: it goes, counted as evicted for the group that had not read it.
    policy("q", 3600, 0);
    let r = retention_step("q", "'infinity'", "NULL", 100);
    assert_eq!((r["deleted"].as_i64(), r["evicted"].as_i64(), r["clamped"].as_bool()), (Some(1), Some(3), Some(true)), "{r}");
    // An earlier cutoff than the policy's stands and is not reported as clamped.
    push_n("q", "Default", "u", 1);
    age("q", 7200);
    let r = retention_step("q", "clock_timestamp() - interval '90 minutes'", "NULL", 100);
    assert_eq!((r["deleted"].as_i64(), r["clamped"].as_bool()), (Some(1), Some(false)), "{r}");
}

/// Rule 2 and a group registered on the queue that has never read a partition (one
/// created after it registered): what its subscription still needs is kept
/// (docs/contract.md §13; docs/decisions.md, "Rule 2 and a group that has never read a
/// partition").
#[pg_test]
fn retention_rule2_keeps_what_a_registered_group_has_not_read_unless_it_starts_later() {
    policy("q", 0, 60);
    push_n("q", "Default", "a", 3);
    for (g, mode) in [("gA", "all"), ("gAll", "all"), ("gNew", "new")] {
        Spi::run(&format!(
            "SELECT count(*) FROM queen.log_pop_queue_v1('q', '{g}', 100, 60, 'w', true, '{mode}', '', 5)"
        ))
        .unwrap();
    }
    push_n("q", "P2", "old", 3); // a partition none of them has a cursor on
    let p2 = pid_of("q", "P2");
    let read = |g: &str| {
        Spi::run(&format!("SELECT count(*) FROM queen.log_pop_v1('q', 'P2', '{g}', 100, 30, 'w', true)")).unwrap()
    };
    read("gA");
    age("q", 7200);
    // gNew subscribed (mode 'new') before these messages were pushed.
    Spi::run("UPDATE queen.consumer_groups_metadata SET subscription_timestamp = clock_timestamp() - interval '3 hours'
               WHERE consumer_group = 'gNew'").unwrap();
    let step = || j(&format!("SELECT queen.log_retention_step_v1('{p2}', NULL, clock_timestamp(), 100)"));
    let r = step();
    assert_eq!((r["deleted"].as_i64(), r["evicted"].as_i64()), (Some(0), Some(0)), "gAll ('all') needs them: {r}");
    read("gAll");
    let r = step();
    assert_eq!((r["deleted"].as_i64(), r["evicted"].as_i64()), (Some(0), Some(0)), "gNew's subscription precedes them: {r}");
    // A subscription instant after the messages: gNew starts past them, they go, no loss.
    Spi::run("UPDATE queen.consumer_groups_metadata SET subscription_timestamp = clock_timestamp() - interval '1 hour'
               WHERE consumer_group = 'gNew'").unwrap();
    let r = step();
    assert_eq!((r["deleted"].as_i64(), r["evicted"].as_i64()), (Some(1), Some(0)), "{r}");
    assert_eq!(i64_of(&format!("SELECT count(*) FROM queen.log_consumers WHERE partition_id = '{p2}' AND consumer_group = 'gNew'")), 0);
    // Its first contact then starts at the end, and both lag views agree.
    read("gNew");
    assert_eq!(text_of(&format!("SELECT committed || '|' || evicted FROM queen.log_consumers
                                  WHERE partition_id = '{p2}' AND consumer_group = 'gNew'")), Some("2|0".into()));
}

/// Rule 1 evicts what a registered group without a cursor would have read: it gets its
/// cursor at the new log start with the loss counted, so both lag views agree.
#[pg_test]
fn retention_rule1_counts_what_a_registered_group_without_a_cursor_loses() {
    policy("q", 60, 0);
    push_n("q", "Default", "a", 1);
    Spi::run("SELECT count(*) FROM queen.log_pop_queue_v1('q', 'gAll', 100, 60, 'w', true, 'all', '', 5)").unwrap();
    push_n("q", "P2", "old", 3);
    let p2 = pid_of("q", "P2");
    age("q", 7200);
    push_n("q", "P2", "young", 2);
    let r = j(&format!("SELECT queen.log_retention_step_v1('{p2}', clock_timestamp(), NULL, 100)"));
    assert_eq!((r["deleted"].as_i64(), r["evicted"].as_i64()), (Some(1), Some(3)), "{r}");
    assert_eq!(text_of(&format!("SELECT committed || '|' || evicted FROM queen.log_consumers
                                  WHERE partition_id = '{p2}' AND consumer_group = 'gAll'")), Some("2|3".into()));
    assert_eq!(i64_of(&format!("SELECT count(*) FROM queen.log_leases WHERE partition_id = '{p2}' AND consumer_group = 'gAll'")), 1);
    assert_eq!(i64_of(&format!("SELECT count(*) FROM queen.consumer_lag l
                                  JOIN queen.queue_stats_v1() s ON s.r_partition_id = l.partition_id AND s.r_consumer_group = l.consumer_group
                                 WHERE l.partition_id = '{p2}' AND l.lag IS DISTINCT FROM s.r_lag")), 0);
    let served = i64_of("SELECT COALESCE(sum(r_take), 0) FROM queen.log_pop_queue_v1('q', 'gAll', 100, 60, 'w', true, 'all', '', 5)");
    assert_eq!(served, 2, "the young messages are still delivered");
}

#[pg_test]
fn purge_clamps_a_future_cutoff_and_keeps_the_window() {
    push_n("q", "Default", "t", 3);
    let pid = pid_of("q", "Default");
    let r = j(&format!("SELECT queen.log_txns_purge_step_v1('{pid}', 'infinity', 100)"));
    assert_eq!(r, serde_json::json!({"deleted": 0, "new_txns_start": 0, "done": true, "clamped": true}));
    // Dedup still catches a duplicate inside the window, and an ack by id resolves.
    assert_eq!(push_n("q", "Default", "t", 1)["status"], "duplicate");
    lease("q", "g", "w", 3);
    assert_eq!(ack_hash("q", "g", "w", &["t0", "t1", "t2"], None)["acked"], 3);
}

#[pg_test]
fn purge_runs_on_the_queues_clock() {
    push_n("q", "Default", "t", 2);
    age("q", 2000); // older than 900 s but inside the default 3600 s dedup window
    let pid = pid_of("q", "Default");
    let step = || j(&format!("SELECT queen.log_txns_purge_step_v1('{pid}', clock_timestamp(), 100)"));
    assert_eq!(step()["deleted"], 0);
    Spi::run("UPDATE queen.queues SET dedup_window_seconds = 60").unwrap();
    let r = step();
    assert_eq!((r["deleted"].as_i64(), r["new_txns_start"].as_i64()), (Some(1), Some(2)));
    Spi::run("UPDATE queen.queues SET completed_retention_seconds = 3000").unwrap();
    push_n("q", "Default", "u", 1);
    age("q", 2000);
    assert_eq!(step()["deleted"], 0, "completed retention lengthens the clock");
}

#[pg_test]
fn ack_by_id_of_a_leased_batch_resolves_after_its_hashes_were_purged() {
    push_n("q", "Default", "t", 3);
    age("q", 7200);
    let pid = pid_of("q", "Default");
    j(&format!("SELECT queen.log_txns_purge_step_v1('{pid}', clock_timestamp(), 100)"));
    assert_eq!(i64_of("SELECT txns_start FROM queen.log_partitions"), 3, "every hash purged");
    lease("q", "g", "w", 3);
    let r = ack_hash("q", "g", "w", &["t0", "t1", "t2"], None);
    assert_eq!((r["acked"].as_i64(), r["leaseReleased"].as_bool()), (Some(3), Some(true)), "{r}");
    // A nack resolves the same way (and charges the budget).
    push_n("q", "Default", "u", 2);
    age("q", 7200);
    j(&format!("SELECT queen.log_txns_purge_step_v1('{pid}', clock_timestamp(), 100)"));
    lease("q", "g", "w", 2);
    let r = ack_hash("q", "g", "w", &["u0", "u1"], Some(&["ok", "failed"]));
    assert_eq!((r["acked"].as_i64(), r["off"].as_i64()), (Some(1), Some(3)), "{r}");
    assert_eq!(cursor("q", "g"), "3|-|-|1|3|1|4");
}

#[pg_test]
fn orphans_of_a_plain_delete_of_queues_are_removed_in_bounded_steps() {
    push_n("q", "Default", "t", 3);
    push_n("q", "Default", "u", 3);
    push_n("keep", "Default", "k", 1);
    let pid = pid_of("q", "Default");
    lease("q", "g", "w", 1);
    j(&format!("SELECT queen.log_dlq_head_v1('{pid}', 'g', 'w', 0, NULL, NULL, NULL, 'x')"));
    Spi::run("DELETE FROM queen.queues WHERE name = 'q'").unwrap();
    assert_eq!(i64_of(&format!("SELECT (SELECT count(*) FROM queen.log_txns WHERE partition_id = '{pid}')
                                   + (SELECT count(*) FROM queen.log_dlq WHERE partition_id = '{pid}')")), 3);
    let r = j("SELECT queen.log_orphans_step_v1(1)");
    assert_eq!((r["removed"].as_i64(), r["done"].as_bool()), (Some(1), Some(false)));
    let r = j("SELECT queen.log_orphans_step_v1(10)");
    assert_eq!((r["removed"].as_i64(), r["done"].as_bool()), (Some(2), Some(true)), "{r}");
    assert_eq!(i64_of(&format!("SELECT count(*) FROM queen.log_txns WHERE partition_id = '{pid}'")), 0);
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_dlq"), 0);
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_txns"), 1, "the live queue's rows stay");
    assert_eq!(j("SELECT queen.log_orphans_step_v1(10)")["removed"], 0);
}

#[pg_test]
fn maintenance_plan_lists_only_partitions_with_due_work() {
    j("SELECT queen.configure_queue_v1('r', NULL, NULL, '{\"retentionSeconds\": 60}')");
    push_n("r", "Default", "t", 1);
    push_n("idle", "Default", "t", 1);
    let plan = || text_of("SELECT string_agg(q.name || ':' || r_retention_due || ':' || r_purge_due, ',' ORDER BY q.name)
                            FROM queen.maintenance_plan_v1() m
                            JOIN queen.log_partitions p ON p.id = m.r_partition_id JOIN queen.queues q ON q.id = p.queue_id");
    assert_eq!(plan(), None, "nothing is due yet");
    age("r", 120);
    assert_eq!(plan(), Some("r:true:false".into()));
    age("idle", 4000);
    assert_eq!(plan(), Some("idle:false:true,r:true:false".into()));
}
