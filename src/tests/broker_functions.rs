// #[pg_test]s for the broker-facing functions that replace direct table reads (docs/security.md, least privilege),
// the typed wire shapes every jsonb result must keep, and the one payload rule.

use queen_log::wire;

/// A jsonb result read into its wire type and written back must be the same JSON: no
/// key missing, none extra, none renamed.
fn same_shape<T: serde::de::DeserializeOwned + serde::Serialize>(v: &Value) {
    let typed: T = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v}"));
    assert_eq!(&serde_json::to_value(&typed).unwrap(), v, "shape of {}", std::any::type_name::<T>());
}

#[pg_test]
fn every_jsonb_result_has_its_wire_shape() {
    let cfg = j("SELECT queen.configure_queue_v1('q', NULL, NULL, '{\"retryLimit\": 0}')");
    same_shape::<wire::Configured>(&cfg);
    same_shape::<wire::QueueInfo>(&j("SELECT queen.queue_info_v1('q')"));
    let pushed = push_n("q", "Default", "t", 3);
    same_shape::<wire::PushVerdict>(&serde_json::json!({"status": pushed["status"], "baseOffset": pushed["baseOffset"],
                                                        "createdAt": pushed["createdAt"], "partitionId": pushed["partitionId"]}));
    same_shape::<Vec<wire::PushVerdict>>(&j(&format!("SELECT queen.log_push_multi_v1(ARRAY['q'], ARRAY['Default'], ARRAY[1], ARRAY[queen.xxh3_128('t0')], ARRAY[-1]::bigint[], ARRAY[{}])", seg(&["t0"]))));
    lease("q", "g", "w", 3);
    same_shape::<wire::Reply<wire::HashAck>>(&ack_hash("q", "g", "w", &["t0"], None));
    same_shape::<wire::Reply<wire::HashAck>>(&ack_hash("q", "g", "w", &["t1"], Some(&["failed"])));
    same_shape::<wire::Reply<wire::HashAck>>(&ack_hash("q", "nobody", "w", &["t1"], None));
    lease("q", "g", "w", 3);
    let pid = pid_of("q", "Default");
    let dlq = ack_hash("q", "g", "w", &["t1"], Some(&["dlq"]));
    same_shape::<wire::Reply<wire::HashAck>>(&dlq);
    let filed = j(&format!("SELECT queen.log_dlq_head_v1('{pid}', 'g', 'w', 1, NULL, NULL, NULL, 'x')"));
    same_shape::<wire::Reply<wire::DlqFiled>>(&filed);
    same_shape::<wire::DlqPage>(&j("SELECT queen.dlq_list_v1('q', NULL, 10, 0)"));
    lease("q", "g", "w", 3);
    same_shape::<wire::Reply<wire::PositionalAck>>(&j(&format!("SELECT queen.log_ack_at_v1('{pid}', 'g', 'w', 2)")));
    same_shape::<wire::MultiAck>(&j(&format!(
        "SELECT queen.log_ack_multi_v1(ARRAY['{pid}'], ARRAY['g'], ARRAY[2]::bigint[], ARRAY['w'], ARRAY[1])")));
    same_shape::<wire::Renewed>(&j("SELECT queen.log_renew_lease_v1('w', 10)"));
    same_shape::<wire::PurgeStep>(&j(&format!("SELECT queen.log_txns_purge_step_v1('{pid}', clock_timestamp() - interval '1 day', 10)")));
    same_shape::<wire::GroupDeleted>(&j("SELECT queen.delete_consumer_group_v1('g', 'q')"));
    same_shape::<wire::Deleted>(&j("SELECT queen.delete_queue_v1('q')"));
}

#[pg_test]
fn wire_request_type_is_what_the_transaction_wire_reads() {
    let req = wire::TxnWireRequest {
        pushes: vec![wire::WirePush {
            queue: "w".into(),
            partition: "Default".into(),
            count: 1,
            hashes_hex: queen_log::hash::hash_hex(&queen_log::hash::txn_hash("a")),
            blob_b64: base64::Engine::encode(&base64::engine::general_purpose::STANDARD, frames_blob(&[("a", b"{}")])),
            verified: None,
        }],
        acks: Vec::new(),
        timers: Vec::new(),
        kv: Vec::new(),
        tenant: None,
    };
    let sql = format!("SELECT queen.log_transaction_wire_v1('{}'::jsonb)", serde_json::to_string(&req).unwrap());
    same_shape::<wire::TxnWire>(&j(&sql));
}

/// Push pre-encoded frames through log_push_one_v1, as a foreign producer would.
fn push_frames(queue: &str, frames: &[(&str, &[u8])]) {
    let hashes: Vec<u8> = frames.iter().flat_map(|(t, _)| queen_log::hash::txn_hash(t)).collect();
    Spi::get_one_with_args::<JsonB>(
        "SELECT queen.log_push_one_v1($1, 'Default', $2, $3, -1, $4)",
        &[queue.into(), (frames.len() as i32).into(), hashes.into(), frames_blob(frames).into()],
    )
    .unwrap();
}

/// One sealed frame (flag 4) with `payload`, as a broker holding the key writes it.
fn sealed_blob(txn: &str, payload: &[u8]) -> Vec<u8> {
    let frame = queen_log::frame::Frame {
        message_id: *uuid::Uuid::now_v7().as_bytes(),
        trace_id: None,
        transaction_id: txn.to_string(),
        producer_sub: None,
        encrypted: true,
        payload: payload.to_vec(),
    };
    queen_log::segment::encode_segment(&[frame]).unwrap()
}

fn push_blob_state(queue: &str, txn: &str, blob: Vec<u8>) -> String {
    let sql = format!(
        "SELECT queen.log_push_one_v1('{queue}', 'Default', 1, queen.xxh3_128('{txn}'), -1, '\\x{}'::bytea)",
        blob.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    sqlstate_of(&sql)
}

#[pg_test]
fn an_encrypting_queue_takes_sealed_frames_only() {
    j("SELECT queen.configure_queue_v1('enc', NULL, NULL, '{\"encryptionEnabled\": true}')");
    assert_eq!(text_of("SELECT encryption_enabled::text FROM queen.queues WHERE name = 'enc'").unwrap(), "true");
    let iv = "AAAAAAAAAAAAAAAAAAAAAA==";
    let envelope = format!(r#"{{"encrypted":"YQ==","iv":"{iv}","authTag":"{iv}"}}"#);
    let before = table_counts();
    // Plaintext, by a raw segment or by queen.push: 55000 naming the option, nothing written.
    let e = push_blob_state("enc", "p", frames_blob(&[("p", b"1")]));
    assert!(e.starts_with("55000") && e.contains("encrypts payloads"), "{e}");
    let e = sqlstate_of("SELECT queen.push('enc', '[1]'::jsonb)");
    assert!(e.starts_with("55000"), "{e}");
    // Flagged encrypted but not an envelope, into any queue: 22023.
    let e = push_blob_state("plain", "x", sealed_blob("x", b"{\"a\": 1}"));
    assert!(e.starts_with("22023") && e.contains("envelope"), "{e}");
    assert_eq!(table_counts(), before, "a refused push writes nothing");
    // A sealed frame is stored, and reads back flagged with its envelope.
    assert_eq!(push_blob_state("enc", "s", sealed_blob("s", envelope.as_bytes())), "ok");
    let pid = pid_of("enc", "Default");
    let m = j(&format!("SELECT queen.get_message_v1('{pid}', 's', '00000000-0000-0000-0000-000000000001')"));
    assert_eq!(m["isEncrypted"], serde_json::json!(true));
    assert_eq!(m["payload"]["iv"], serde_json::json!(iv));
    // Turned off, plaintext is taken again.
    j("SELECT queen.configure_queue_v1('enc', NULL, NULL, '{\"encryptionEnabled\": false}')");
    assert_eq!(push_blob_state("enc", "p", frames_blob(&[("p", b"1")])), "ok");
}

#[pg_test]
fn payloads_read_back_by_one_rule_in_every_psql_reader() {
    push_frames("q", &[("json", br#"{"big": 123456789012345678901234567890}"#), ("text", b"not json"),
                       ("bytes", &[0xff, 0x00]), ("empty", b"")]);
    let decoded = text_of("SELECT string_agg(d.payload::text, ' | ' ORDER BY d.frame_index)
                             FROM queen.log_segments s, queen.decode_segment_v1(s.blob) d").unwrap();
    let popped = text_of("SELECT string_agg(r_payload::text, ' | ' ORDER BY r_offset)
                            FROM queen.pop('q', p_batch => 10, p_lease_seconds => 30)").unwrap();
    assert_eq!(decoded, r#"{"big": 123456789012345678901234567890} | "not json" | "/wA=" | null"#);
    assert_eq!(popped, decoded);
    // And a DLQ row snapshots the same rendering.
    let pid = pid_of("q", "Default");
    j(&format!("SELECT queen.log_dlq_head_v1('{pid}', '__QUEUE_MODE__', NULL, 1, NULL, NULL, NULL, 'x')"));
    assert_eq!(text_of("SELECT payload::text FROM queen.log_dlq").unwrap(), "\"not json\"");
}

#[pg_test]
fn ack_signal_results_name_the_head_element() {
    leased_batch(3);
    let r = ack_hash("q", "g", "w", &["t0", "t2", "t1"], Some(&["ok", "retry", "failed"]));
    assert_eq!((r["headIndex"].as_u64(), r["off"].as_i64()), (Some(2), Some(0)), "{r}");
    lease("q", "g", "w", 3);
    let plain = ack_hash("q", "g", "w", &["t0"], None);
    assert!(plain.get("headIndex").is_none(), "{plain}");
}

#[pg_test]
fn dlq_head_refuses_an_offset_beyond_the_leased_batch() {
    let pid = leased_batch(2);
    push_n("q", "Default", "later", 2);
    let before = table_counts();
    let r = j(&format!("SELECT queen.log_dlq_head_v1('{pid}', 'g', 'w', 2, NULL, NULL, NULL, 'x')"));
    assert_eq!(r, serde_json::json!({"ok": false, "error": "offset beyond leased batch"}));
    assert_eq!(table_counts(), before, "nothing filed, cursor unchanged");
}

#[pg_test]
fn dlq_head_refuses_an_offset_past_the_end_of_the_log() {
    push_n("q", "Default", "t", 2);
    lease("q", "g", "w", 2);
    ack_hash("q", "g", "w", &["t0", "t1"], None);
    let pid = pid_of("q", "Default");
    let before = table_counts();
    for off in ["2", "9223372036854775807"] {
        let r = j(&format!("SELECT queen.log_dlq_head_v1('{pid}', 'g', NULL, {off}, NULL, NULL, NULL, 'x')"));
        assert_eq!(r, serde_json::json!({"ok": false, "error": "no such message: offset outside the partition's log"}), "{off}");
    }
    assert_eq!(table_counts(), before);
    // The cursor did not move past the log: the next push is delivered.
    push_n("q", "Default", "n", 1);
    assert_eq!(lease("q", "g", "w2", 5), Some((2, 2)));
}

#[pg_test]
fn broker_pop_defaults_to_the_queue_lease_and_reports_attempts() {
    j("SELECT queen.configure_queue_v1('q', NULL, NULL, '{\"leaseTime\": 77}')");
    push_n("q", "Default", "t", 3);
    let rows = |sql: &str| text_of(&format!("SELECT string_agg(concat_ws(':', r_partition, r_base + r_start_idx, r_take, r_msg_count, r_attempt), ',') FROM ({sql}) x")).unwrap_or_default();
    let first = rows("SELECT * FROM queen.broker_pop_v1(NULL, 'q', 'Default', 'g', 2, NULL, 'w1')");
    assert_eq!(first, "Default:0:2:3:1");
    let secs = i64_of("SELECT extract(epoch FROM lease_expires_at - lease_acquired_at)::bigint FROM queen.log_leases");
    assert_eq!(secs, 77, "NULL lease = the queue's lease_time");
    Spi::run("UPDATE queen.log_leases SET lease_expires_at = clock_timestamp() - interval '1 s'").unwrap();
    let again = rows("SELECT * FROM queen.broker_pop_v1(NULL, 'q', NULL, 'g', 2, 0, 'w2', p_max_partitions => 3)");
    assert_eq!(again, "Default:0:2:3:2", "queue-level, lease 0 = queue's; a redelivery is attempt 2");
    assert_eq!(rows("SELECT * FROM queen.broker_pop_v1(NULL, 'nope', NULL, 'g', 2, NULL, 'w3')"), "");
    assert_eq!(rows("SELECT * FROM queen.broker_pop_v1(NULL, 'q', 'Default', 'h', 5, NULL, '', true)"), "Default:0:3:3:1",
               "auto-ack: attempt 1");
    assert!(sqlstate_of("SELECT * FROM queen.broker_pop_v1(NULL, 'nope', NULL, 'g', 0, NULL, 'w')").starts_with("22023"));
}

#[pg_test]
fn partitions_lookup_and_cursor_worker() {
    push_n("q", "Default", "t", 1);
    push_n("q", "B", "t", 1);
    let pid = pid_of("q", "B");
    let found = text_of("SELECT string_agg(r_index || ':' || COALESCE(r_partition_id::text, '-') || ':' || r_dedup_window || ':' || r_encrypted, ',' ORDER BY r_index)
                           FROM queen.partitions_lookup_v1('00000000-0000-0000-0000-000000000001', ARRAY['q','q','x'], ARRAY['nope','B','B'])").unwrap();
    // A partition not created yet still names its queue's settings; an unknown queue nothing.
    assert_eq!(found, format!("1:-:3600:false,2:{pid}:3600:false"));
    lease("q", "g", "w9", 1);
    let dpid = pid_of("q", "Default");
    assert_eq!(text_of(&format!("SELECT queen.cursor_worker_v1('{dpid}', 'g')")), Some("w9".into()));
    assert_eq!(text_of(&format!("SELECT queen.cursor_worker_v1('{pid}', 'g')")), None);
}

/// An auto-acking queue pop tries the page its backend kept from the last one first
/// (src/pop.rs, `kept`); a partition that became ready after that page was read is
/// still served once the kept ones are drained, never answered empty.
#[pg_test]
fn an_auto_ack_pop_serves_a_partition_newer_than_its_kept_page() {
    push_n("q", "A", "a", 1);
    push_n("q", "B", "b", 1);
    let pop = || text_of("SELECT string_agg(r_partition, ',') FROM queen.broker_pop_v1(NULL, 'q', NULL, 'g', 1, NULL, '', true)").unwrap_or_default();
    let first = pop();
    assert!(first == "A" || first == "B", "{first}");
    push_n("q", "C", "c", 1);
    let mut seen = vec![first, pop(), pop()];
    seen.sort();
    assert_eq!(seen, ["A", "B", "C"], "the kept page [A, B], then a fresh one for C");
    assert_eq!(pop(), "", "nothing left");
    push_n("q", "A", "a2", 1);
    assert_eq!(pop(), "A", "a drained partition that got a message is served again");
}

/// A queue pop tries its hints (p_hints: the broker's partitions pushed to lately) before
/// any page, only those of its own queue, each with the claim's checks.
#[pg_test]
fn a_queue_pop_tries_its_hints_first_and_only_its_queues() {
    for p in ["A", "B", "C"] {
        push_n("q", p, &p.to_lowercase(), 1);
    }
    push_n("other", "X", "x", 1);
    let (c, x) = (pid_of("q", "C"), pid_of("other", "X"));
    let pop = |w: &str, hints: &[&str]| {
        text_of(&format!(
            "SELECT string_agg(r_partition, ',') FROM queen.broker_pop_v1(NULL, 'q', NULL, 'g', 1, 60, '{w}',
                    false, 'all', '', 1, NULL, ARRAY[{}]::uuid[])",
            hints.iter().map(|h| format!("'{h}'")).collect::<Vec<_>>().join(",")
        ))
        .unwrap_or_default()
    };
    assert_eq!(pop("w1", &[&x, &c]), "C", "X is another queue's: dropped; C before any page");
    let next = pop("w2", &[&c]);
    assert!(next == "A" || next == "B", "C is leased: its hint fails and the page serves, got {next}");
    assert_eq!(
        text_of("SELECT string_agg(r_partition, ',') FROM queen.broker_pop_v1(NULL, 'other', NULL, 'g', 1, 60, 'w3', false)"),
        Some("X".into()),
        "nothing of another queue was served through q"
    );
}

/// Hints end a pop only when they filled it: a pop of up to two partitions whose hints
/// serve one takes the second from a page.
#[pg_test]
fn a_pop_of_several_partitions_goes_past_its_hints_to_fill_up() {
    // The group's cursors made first (one auto-acked message each), so that no cursor is
    // created here: a pop creating cursors takes partitions in ascending id only.
    for p in ["A", "B"] {
        push_n("q", p, &p.to_lowercase(), 2);
        text_of(&format!(
            "SELECT r_partition FROM queen.broker_pop_v1(NULL, 'q', '{p}', 'g', 1, NULL, '', true)"
        ));
    }
    let b = pid_of("q", "B");
    let served = text_of(&format!(
        "SELECT string_agg(r_partition, ',' ORDER BY r_partition) FROM queen.broker_pop_v1(NULL, 'q', NULL, 'g', 10, 60,
                'w', false, 'all', '', 2, NULL, ARRAY['{b}']::uuid[])"
    ));
    assert_eq!(served.as_deref(), Some("A,B"));
}

/// Hints naming partitions a group has no cursor on yet, higher id first: a pop of both
/// creates both cursors (it locks partitions in ascending id, so hints are tried by id).
#[pg_test]
fn a_pop_of_two_new_partitions_hinted_higher_id_first_serves_both() {
    for p in ["A", "B"] {
        push_n("q", p, &p.to_lowercase(), 1);
    }
    let mut ids = [pid_of("q", "A"), pid_of("q", "B")];
    ids.sort();
    let served = text_of(&format!(
        "SELECT string_agg(r_partition, ',' ORDER BY r_partition) FROM queen.broker_pop_v1(NULL, 'q', NULL, 'g', 10, 60,
                'w', false, 'all', '', 2, NULL, ARRAY['{}', '{}']::uuid[])",
        ids[1], ids[0]
    ));
    assert_eq!(served.as_deref(), Some("A,B"));
}

/// A leasing pop keeps its page too, without the partitions it leased: the next pop of
/// the backend serves another partition from the kept page, none is served twice while
/// leased, and a partition whose lease was acked is served again from a fresh page,
/// though the kept page dropped it.
#[pg_test]
fn a_leasing_pop_keeps_its_page_without_what_it_leased() {
    push_n("q", "A", "a", 2);
    push_n("q", "B", "b", 2);
    let pop = |w: &str| {
        text_of(&format!(
            "SELECT string_agg(r_partition, ',') FROM queen.broker_pop_v1(NULL, 'q', NULL, 'g', 1, 60, '{w}', false)"
        ))
        .unwrap_or_default()
    };
    let first = pop("w1");
    let second = pop("w2");
    let mut both = vec![first.clone(), second];
    both.sort();
    assert_eq!(both, ["A", "B"], "each partition once while leased");
    assert_eq!(pop("w3"), "", "both leased");
    let pid = pid_of("q", &first);
    j(&format!("SELECT queen.log_ack_at_v1('{pid}', 'g', 'w1', 0)"));
    assert_eq!(pop("w4"), first, "acked, ready again: served from a fresh page");
}
