// #[pg_test]s for the broker-facing SQL API and least privilege.

#[pg_test]
fn configure_creates_then_updates_queue_and_default_partition() {
    let r = j("SELECT queen.configure_queue_v1('jobs.email', NULL, NULL, '{\"leaseTime\": 5, \"retryLimit\": 7, \"priority\": 0}')");
    assert_eq!((r["queue"].as_str(), r["namespace"].as_str(), r["task"].as_str()), (Some("jobs.email"), Some("jobs"), Some("email")));
    assert_eq!(r["partitionId"].as_str().unwrap(), pid_of("jobs.email", "Default"));
    let r = j("SELECT queen.configure_queue_v1('jobs.email', NULL, NULL, '{\"retryLimit\": 1}')");
    assert_eq!((r["leaseTime"].as_i64(), r["retryLimit"].as_i64()), (Some(5), Some(1)), "unsent options keep their values");
    assert_eq!(text_of("SELECT options->>'priority' FROM queen.queues").unwrap(), "0", "a Queen option is kept verbatim");
    assert_eq!(r["options"]["priority"], 0, "the answer echoes every option's effective value");
    // Every option is enforced or refused (queen_log::options), from psql as from the broker.
    let before = table_counts();
    for (bad, names) in [
        (r#"{"leaseTime": "soon"}"#, "options.leaseTime"),
        (r#"{"priority": -9}"#, "options.priority"),
        (r#"{"encryptionEnabled": 1}"#, "options.encryptionEnabled"),
        (r#"{"colour": "red"}"#, "options.colour"),
        (r#"{"retentionEnabled": false}"#, "options.retentionEnabled"),
    ] {
        let e = sqlstate_of(&format!("SELECT queen.configure_queue_v1('jobs.email', NULL, NULL, '{bad}')"));
        assert!(e.starts_with("22023") && e.contains(names), "{bad}: {e}");
    }
    assert_eq!(table_counts(), before, "a refused configure changes nothing");
    assert!(sqlstate_of("SELECT queen.configure_queue_v1('', NULL, NULL, '{}')").starts_with("22023"));
}

#[pg_test]
fn delete_queue_removes_sidecar_and_dlq_rows_too() {
    let pid = {
        push_n("q", "Default", "t", 2);
        lease("q", "g", "w", 2);
        pid_of("q", "Default")
    };
    j(&format!("SELECT queen.log_dlq_head_v1('{pid}', 'g', 'w', 0, NULL, NULL, NULL, 'x')"));
    assert_eq!(j("SELECT queen.delete_queue_v1('q')")["existed"], true);
    assert_eq!(table_counts(), "0/0/0/0/0+0/0/0:");
    assert_eq!(j("SELECT queen.delete_queue_v1('q')")["existed"], false);
}

#[pg_test]
fn dlq_list_pages_newest_first_with_payload() {
    push_n("q", "Default", "t", 3);
    lease("q", "g", "w", 3);
    let pid = pid_of("q", "Default");
    j(&format!("SELECT queen.log_dlq_head_v1('{pid}', 'g', 'w', 0, NULL, NULL, NULL, 'first')"));
    lease("q", "g", "w", 2);
    Spi::run("UPDATE queen.log_dlq SET failed_at = failed_at - interval '1 minute'").unwrap();
    j(&format!("SELECT queen.log_dlq_head_v1('{pid}', 'g', 'w', 1, NULL, NULL, NULL, 'second')"));
    let r = j("SELECT queen.dlq_list_v1('q', NULL, 1, 0)");
    assert_eq!(r["total"], 2);
    let m = &r["messages"][0];
    assert_eq!((m["errorMessage"].as_str(), m["transactionId"].as_str()), (Some("second"), Some("t1")));
    assert_eq!(m["data"], serde_json::json!({"n": 1}));
    assert_eq!(m["failedAt"].as_str().unwrap().len(), 24, "millisecond timestamps");
    assert_eq!(j("SELECT queen.dlq_list_v1('q', 'other', 10, 0)")["total"], 0);
}

#[pg_test]
fn renew_with_tenant_gate_treats_foreign_lease_as_unknown() {
    leased_batch(1);
    let foreign = j("SELECT queen.log_renew_lease_tenant_v1('w', 600, '00000000-0000-0000-0000-000000000002')");
    assert_eq!(foreign, j("SELECT queen.log_renew_lease_tenant_v1('never-issued', 600, '00000000-0000-0000-0000-000000000002')"));
    assert_eq!(foreign["renewed"], 0);
    assert_eq!(j("SELECT queen.log_renew_lease_tenant_v1('w', 600, '00000000-0000-0000-0000-000000000001')")["renewed"], 1);
}

#[pg_test]
fn broker_role_executes_functions_but_cannot_write_tables() {
    Spi::run("CREATE ROLE qa_broker_login LOGIN IN ROLE queen_broker").unwrap();
    Spi::run("CREATE ROLE qa_stranger LOGIN").unwrap();
    sqlstate_of("SELECT 1"); // create the helper before switching roles
    Spi::run("SET LOCAL ROLE qa_broker_login").unwrap();
    // Everything goes through functions...
    push_n("q", "Default", "t", 2);
    let acked = j("SELECT queen.ack(r_partition_id, r_lease_id, array_agg(r_transaction_id))
                     FROM queen.pop('q', 'Default', p_batch => 2, p_lease_seconds => 30)
                    GROUP BY r_partition_id, r_lease_id");
    assert_eq!(acked["acked"], 2);
    // ...and the views an operator reads...
    assert_eq!(i64_of("SELECT committed FROM queen.consumer_lag"), 1);
    assert_eq!(i64_of("SELECT segments FROM queen.partition_storage"), 1);
    // ...while no table can be written or read directly (docs/security.md, least privilege: the schema is not
    // part of the broker's API; 0.1.0 let it read every table).
    assert!(sqlstate_of("INSERT INTO queen.queues (name) VALUES ('direct')").starts_with("42501"));
    assert!(sqlstate_of("UPDATE queen.log_consumers SET committed = 99").starts_with("42501"));
    for t in ["queues", "log_partitions", "log_segments", "log_txns", "log_consumers", "log_leases",
              "log_dlq", "consumer_groups_metadata", "maintenance_state"] {
        let r = sqlstate_of(&format!("SELECT count(*) FROM queen.{t}"));
        assert!(r.starts_with("42501"), "the broker role read queen.{t}: {r}");
    }
    Spi::run("RESET ROLE; SET LOCAL ROLE qa_stranger").unwrap();
    assert!(sqlstate_of("SELECT queen.log_renew_lease_v1('w', 5)").starts_with("42501"));
}

#[pg_test]
fn names_over_255_bytes_are_refused_with_22023_wherever_they_would_be_stored() {
    // Names are capped at 255 bytes: a partition or group name of ~2,700 bytes failed inside a btree
    // index (54000); queen_log::names is now the rule on both sides.
    push_n("q", "Default", "t", 1);
    let before = table_counts();
    let long = "p".repeat(256);
    let wide = "é".repeat(128); // 128 characters, 256 bytes
    let rule = |kind: &str| format!("22023: {kind} name is 256 bytes long; at most 255 bytes (UTF-8) are allowed");
    for name in [&long, &wide] {
        assert_eq!(sqlstate_of(&format!("SELECT queen.push('q', '[1]'::jsonb, ARRAY['x'], '{name}')")), rule("partition"));
        assert_eq!(sqlstate_of(&format!("SELECT queen.push('{name}', '[1]'::jsonb, ARRAY['x'])")), rule("queue"));
        assert_eq!(sqlstate_of(&format!("SELECT * FROM queen.log_pop_v1('q', 'Default', '{name}', 1, 30, 'w')")), rule("consumer group"));
        assert_eq!(sqlstate_of(&format!("SELECT * FROM queen.pop('q', 'Default', p_group => '{name}')")), rule("consumer group"));
        assert_eq!(sqlstate_of(&format!("SELECT queen.configure_queue_v1('{name}', NULL, NULL, '{{}}')")), rule("queue"));
        let wire = format!(
            "SELECT queen.log_transaction_wire_v1(jsonb_build_object('pushes', jsonb_build_array(jsonb_build_object(
               'queue', 'q', 'partition', '{name}', 'count', 1, 'hashesHex', queen.xxh3_128_hex('x'),
               'blobB64', translate(encode({}, 'base64'), E'\\n', '')))))",
            seg(&["x"])
        );
        assert_eq!(sqlstate_of(&wire), rule("partition"));
    }
    assert_eq!(table_counts(), before, "nothing written");
    // 255 bytes are a name like any other.
    let edge = "p".repeat(255);
    assert_eq!(sqlstate_of(&format!("SELECT queen.push('q', '[1]'::jsonb, ARRAY['y'], '{edge}')")), "ok");
    assert_eq!(sqlstate_of(&format!("SELECT * FROM queen.log_pop_v1('q', '{edge}', '{edge}', 1, 30, 'w')")), "ok");
    assert_eq!(text_of(&format!("SELECT queen.check_name_v1('consumer group', '{edge}')")), Some(edge.clone()));
    assert!(sqlstate_of("SELECT queen.check_name_v1('topic', 'x')").starts_with("22023: p_kind must be"));
    assert_eq!(sqlstate_of("SELECT queen.check_name_v1('queue', '')"), "22023: queue name must not be empty");
}

/// The one lease-time rule (queen_log::conventions::queue_lease_time) is what SQL reads
/// through queen.effective_lease_time: NULL means 60, zero and negative mean 1.
#[pg_test]
fn effective_lease_time_is_queen_logs_rule() {
    for v in [None, Some(0), Some(-1), Some(i32::MIN), Some(1), Some(60), Some(86_400)] {
        let arg = v.map_or("NULL".to_string(), |n| n.to_string());
        let sql = i64_of(&format!("SELECT queen.effective_lease_time(({arg})::int)::bigint"));
        assert_eq!(sql, i64::from(queen_log::conventions::queue_lease_time(v)), "lease_time {arg}");
    }
}

/// queue_info_v1's leaseTime is the lease a broker pop asked for none (leaseSeconds 0)
/// really grants, whatever the queue's lease_time: NULL, 0, negative or positive. (It
/// said 0 for a queue with lease_time 0 while the pop granted 1 second.)
#[pg_test]
fn queue_info_lease_time_is_the_lease_a_broker_pop_grants() {
    for (i, lease_time) in ["NULL", "0", "-7", "3"].into_iter().enumerate() {
        let q = format!("lq{i}");
        push_n(&q, "Default", "t", 1);
        Spi::run(&format!("UPDATE queen.queues SET lease_time = {lease_time} WHERE name = '{q}'")).unwrap();
        let served = i64_of(&format!(
            "SELECT count(*) FROM queen.broker_pop_v1(NULL, '{q}', 'Default', 'g', 1, 0, 'w{i}')"
        ));
        assert_eq!(served, 1, "lease_time {lease_time}");
        let granted = i64_of(&format!(
            "SELECT extract(epoch FROM l.lease_expires_at - l.lease_acquired_at)::bigint
               FROM queen.log_leases l JOIN queen.log_partitions p ON p.id = l.partition_id
               JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = '{q}'"
        ));
        let reported = j(&format!("SELECT queen.queue_info_v1('{q}')"))["leaseTime"].as_i64();
        assert_eq!(reported, Some(granted), "lease_time {lease_time}");
    }
}

/// The tenant-gated renewal is log_renew_lease_v1 behind the gate: the same answer for
/// the caller's own lease, and the answer of an unknown lease for a foreign one.
#[pg_test]
fn renew_with_tenant_gate_answers_as_the_plain_renewal() {
    leased_batch(1);
    let own = j("SELECT queen.log_renew_lease_tenant_v1('w', 600, '00000000-0000-0000-0000-000000000001')");
    let plain = j("SELECT queen.log_renew_lease_v1('w', 1)"); // never shortens: same expiry
    assert_eq!(own, plain);
    assert!(own["expiresAt"].is_string());
    let foreign = j("SELECT queen.log_renew_lease_tenant_v1('w', 600, '00000000-0000-0000-0000-000000000002')");
    assert_eq!(foreign, j("SELECT queen.log_renew_lease_v1('never-issued', 600)"));
    assert_eq!(foreign, serde_json::json!({"renewed": 0, "expiresAt": null}));
}
