// #[pg_test]s of the Citus layout (docs/citus.md) on one node: a schema Citus can enforce once distributed (the
// name registry, keys that include the partition column), the id-addressed pop, and the
// distribution step's own checks. The distributed runs are tests/citus_sql.sh.

/// The per-partition tables and the column naming their partition.
const PER_PARTITION: &[(&str, &str)] = &[
    ("log_partitions", "id"),
    ("log_segments", "partition_id"),
    ("log_txns", "partition_id"),
    ("log_consumers", "partition_id"),
    ("log_leases", "partition_id"),
    ("log_dlq", "partition_id"),
];

#[pg_test]
fn every_unique_key_of_a_per_partition_table_includes_its_partition_column() {
    // Citus enforces a unique key or primary key of a distributed table only when it
    // includes the distribution column: UNIQUE (queue_id, name) on log_partitions or
    // PRIMARY KEY (id) on log_dlq would make distribute() fail.
    for (table, col) in PER_PARTITION {
        let missing = i64_of(&format!(
            "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
              WHERE c.oid = 'queen.{table}'::regclass AND i.indisunique
                AND NOT EXISTS (SELECT 1 FROM pg_attribute a
                                 WHERE a.attrelid = c.oid AND a.attname = '{col}'
                                   AND a.attnum = ANY(i.indkey))"
        ));
        assert_eq!(missing, 0, "a unique index of queen.{table} lacks {col}");
    }
}

#[pg_test]
fn every_foreign_key_between_per_partition_tables_joins_their_partition_columns() {
    // Colocated tables may reference each other only on the distribution column.
    let names: Vec<String> = PER_PARTITION.iter().map(|(t, _)| format!("'queen.{t}'::regclass")).collect();
    let bad = text_of(&format!(
        "SELECT string_agg(k.conname, ', ') FROM pg_constraint k
          WHERE k.contype = 'f' AND k.conrelid IN ({list}) AND k.confrelid IN ({list})
            AND NOT EXISTS (
                SELECT 1 FROM unnest(k.conkey, k.confkey) AS u(a, b)
                  JOIN pg_attribute x ON x.attrelid = k.conrelid AND x.attnum = u.a
                  JOIN pg_attribute y ON y.attrelid = k.confrelid AND y.attnum = u.b
                 WHERE x.attname IN ('id', 'partition_id') AND y.attname IN ('id', 'partition_id'))",
        list = names.join(", ")
    ));
    assert_eq!(bad, None);
}

#[pg_test]
fn a_partition_name_is_unique_in_its_queue_through_the_registry() {
    push_n("r", "P", "a", 1);
    push_n("r", "P", "b", 1);
    let qid = text_of("SELECT id::text FROM queen.queues WHERE name = 'r'").unwrap();
    let pid = pid_of("r", "P");
    assert_eq!(i64_of("SELECT count(*) FROM queen.log_partitions WHERE name = 'P'"), 1);
    assert_eq!(text_of(&format!("SELECT queen.provision_partition('{qid}', 'P')::text")), Some(pid.clone()));
    // Every partition row has its registry row, with the same name and queue.
    assert_eq!(
        i64_of("SELECT count(*) FROM queen.log_partitions p JOIN queen.partition_names n USING (id, queue_id, name)"),
        i64_of("SELECT count(*) FROM queen.log_partitions")
    );
    // A second name row for (queue, P), or a partition row the registry does not hold, is refused.
    assert!(sqlstate_of(&format!("INSERT INTO queen.partition_names (queue_id, name) VALUES ('{qid}', 'P')"))
        .starts_with("23505"));
    assert!(sqlstate_of(&format!(
        "INSERT INTO queen.log_partitions (id, queue_id, name) VALUES (gen_random_uuid(), '{qid}', 'P')"
    ))
    .starts_with("23503"));
    assert!(sqlstate_of(&format!("UPDATE queen.log_partitions SET name = 'Q' WHERE id = '{pid}'")).starts_with("23503"));
    // Deleting the queue takes the names with it.
    j("SELECT queen.delete_queue_v1('r')");
    assert_eq!(i64_of("SELECT count(*) FROM queen.partition_names"), 0);
}

#[pg_test]
fn configure_creates_the_default_partition_through_the_registry() {
    let cfg = j("SELECT queen.configure_queue_v1('c', NULL, NULL, '{}')");
    let again = j("SELECT queen.configure_queue_v1('c', NULL, NULL, '{\"retryLimit\": 1}')");
    assert_eq!(cfg["partitionId"], again["partitionId"]);
    assert_eq!(cfg["partitionId"].as_str(), Some(pid_of("c", "Default").as_str()));
    assert_eq!(i64_of("SELECT count(*) FROM queen.partition_names"), 1);
}

/// log_pop_at_v1's rows as "partition|offsets|attempt".
fn pop_at(args: &str) -> String {
    text_of(&format!(
        "SELECT string_agg(concat_ws('|', r_partition, r_base + r_start_idx, r_take, r_attempt), ',')
           FROM queen.log_pop_at_v1({args})"
    ))
    .unwrap_or_default()
}

#[pg_test]
fn log_pop_at_v1_pops_a_partition_by_id_as_broker_pop_v1_does() {
    j("SELECT queen.configure_queue_v1('pa', NULL, NULL, '{\"leaseTime\": 45}')");
    push_n("pa", "Default", "t", 3);
    let pid = pid_of("pa", "Default");
    assert_eq!(pop_at(&format!("'{pid}', 'g', 2, NULL, 'w1'")), "Default|0|2|1");
    // NULL lease = the queue's lease time.
    assert_eq!(
        i64_of("SELECT extract(epoch FROM lease_expires_at - lease_acquired_at)::bigint FROM queen.log_leases"),
        45
    );
    // Leased: nothing more for the group until it is acked; then the rest.
    assert_eq!(pop_at(&format!("'{pid}', 'g', 2, 30, 'w2'")), "");
    assert_eq!(j(&format!("SELECT queen.log_ack_at_v1('{pid}', 'g', 'w1', 1)"))["ok"], true);
    assert_eq!(pop_at(&format!("'{pid}', 'g', 5, 30, 'w2'")), "Default|2|1|1");
    // Another tenant's partition (or an unknown id) serves nothing and changes nothing.
    let before = table_counts();
    let other = "'00000000-0000-0000-0000-0000000000bb'";
    assert_eq!(pop_at(&format!("'{pid}', 'h', 5, 30, 'w3', p_tenant => {other}")), "");
    assert_eq!(pop_at("gen_random_uuid(), 'h', 5, 30, 'w3'"), "");
    assert_eq!(table_counts(), before);
    // Bad arguments are refused whether or not the partition exists.
    assert!(sqlstate_of("SELECT * FROM queen.log_pop_at_v1(NULL, 'g', 1, 30, 'w')").starts_with("22004"));
    assert!(sqlstate_of("SELECT * FROM queen.log_pop_at_v1(gen_random_uuid(), 'g', 0, 30, 'w')").starts_with("22023"));
    assert!(sqlstate_of(&format!("SELECT * FROM queen.log_pop_at_v1('{pid}', 'g', 1, 30, '')")).starts_with("22023"));
}

#[pg_test]
fn distribute_refuses_where_citus_is_not_installed() {
    let before = table_counts();
    let r = sqlstate_of("SELECT queen.distribute()");
    assert!(r.starts_with("55000: queen.distribute: the citus extension is not installed"), "{r}");
    assert!(sqlstate_of("SELECT queen.distribute(0)").starts_with("55000"));
    assert_eq!(table_counts(), before);
    assert_eq!(Spi::get_one::<bool>("SELECT queen.is_distributed('queen.log_txns')").unwrap(), Some(false));
}

#[pg_test]
fn every_distributed_function_is_named_by_its_partition_argument() {
    // Each entry names a function of the extension, and an argument of it that is a
    // partition id: what create_distributed_function routes the call by.
    let bad = text_of(
        "SELECT string_agg(f.r_function::text || ' ' || f.r_argument, ', ')
           FROM queen.distributed_functions() f JOIN pg_proc p ON p.oid = f.r_function
          WHERE NOT EXISTS (SELECT 1 FROM unnest(p.proargnames, p.proargtypes::oid[]) AS a(n, t)
                             WHERE a.n = f.r_argument AND a.t = 'uuid'::regtype)",
    );
    assert_eq!(bad, None);
    assert_eq!(i64_of("SELECT count(*) FROM queen.distributed_functions()"), 15);
}

#[pg_test]
fn the_broker_role_cannot_distribute() {
    assert_eq!(
        Spi::get_one::<bool>("SELECT has_function_privilege('queen_broker', 'queen.distribute(int)', 'EXECUTE')").unwrap(),
        Some(false)
    );
    assert_eq!(
        Spi::get_one::<bool>("SELECT has_function_privilege('queen_broker', 'queen.log_pop_at_v1(uuid, text, int, int, text, bool, text, text, uuid)', 'EXECUTE')")
            .unwrap(),
        Some(true)
    );
}

#[pg_test]
fn log_push_at_v1_pushes_into_a_partition_by_id_and_creates_nothing() {
    push_n("pu", "Default", "a", 1);
    let pid = pid_of("pu", "Default");
    let push = |pid: &str, txns: &[&str], tenant: &str| {
        let hs: Vec<String> = txns.iter().map(|t| h(t)).collect();
        format!(
            "SELECT queen.log_push_at_v1('{pid}', {}, {}, -1, {}, p_tenant => '{tenant}')",
            txns.len(),
            hs.join(" || "),
            seg(txns)
        )
    };
    let t1 = "00000000-0000-0000-0000-000000000001";
    let r = j(&push(&pid, &["b", "c"], t1));
    assert_eq!((r["status"].as_str(), r["baseOffset"].as_i64()), (Some("queued"), Some(1)));
    // The dedup window of its queue applies: the same transactionId again is a duplicate.
    assert_eq!(j(&push(&pid, &["b"], t1))["status"], "duplicate");
    assert_eq!(served("SELECT * FROM queen.log_pop_v1('pu', 'Default', 'g', 10, 30, 'w')"), "0,1,2");
    // Unknown and foreign partitions are refused alike, and nothing is written.
    let before = table_counts();
    let unknown = sqlstate_of(&push("00000000-0000-0000-0000-00000000dead", &["d"], t1));
    assert!(unknown.starts_with("P0001: QPUSH unknown partition"), "{unknown}");
    let foreign = sqlstate_of(&push(&pid, &["d"], "00000000-0000-0000-0000-0000000000bb"));
    assert_eq!(foreign.replace(&pid, "00000000-0000-0000-0000-00000000dead"), unknown);
    assert!(sqlstate_of("SELECT queen.log_push_at_v1(NULL, 1, '\\x00', -1, '\\x00')").starts_with("22004"));
    assert!(sqlstate_of(&format!("SELECT queen.log_push_at_v1('{pid}', 1, '\\x00', -1, '\\x00')")).starts_with("P0001: QPUSH bad segment"));
    assert_eq!(table_counts(), before);
}
