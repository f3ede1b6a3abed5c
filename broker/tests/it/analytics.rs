//! Queen's status and analytics routes over the sampled history (docs/observability.md):
//! what a sampling broker records, the shapes Queen's dashboard and SDK read (the keys
//! are named below), the growth rules of the queue snapshots, the lifecycle's counts, the
//! refresh, and bad input. A broker here samples every 100 ms; the tests wait for the
//! rows they need with a deadline (the sampler is a background task), never a fixed sleep.

use crate::common;

use std::time::{Duration, Instant};

use common::{acks_for, admin, start_with, unique, Broker};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A broker that samples every 100 ms, and its name in the history.
async fn sampling() -> (Broker, String) {
    let b = start_with(|c| c.history_sample_ms = 100).await;
    let port = b.base.rsplit(':').next().unwrap().to_string();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string();
    (b, format!("{host}:{port}"))
}

/// Waits (up to 10 s) until this broker's history rows add up to `pushed` pushed
/// messages and `acked` acked ones.
async fn wait_sampled(broker: &str, pushed: i64, acked: i64) {
    let db = admin().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let row = db
            .query_one(
                "SELECT COALESCE(sum(push_messages), 0)::bigint, COALESCE(sum(ack_messages), 0)::bigint
                   FROM queen.history_brokers WHERE broker = $1",
                &[&broker],
            )
            .await
            .unwrap();
        let (p, a): (i64, i64) = (row.get(0), row.get(1));
        if p >= pushed && a >= acked {
            assert_eq!((p, a), (pushed, acked), "sampled more than was done");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not sampled: {p}/{pushed} {a}/{acked}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Pushes `n` messages into a new queue, pops and acks `acked` of them.
async fn traffic(b: &Broker, n: usize, acked: usize) -> String {
    let q = unique("an");
    b.configure(&q, json!({"leaseTime": 60})).await;
    let items: Vec<Value> = (0..n)
        .map(|i| json!({"queue": q, "transactionId": format!("t{i}"), "payload": {"i": i}}))
        .collect();
    b.push(json!(items)).await;
    let pop = b.pop(&q, &format!("batch={acked}")).await.expect("pop");
    let (s, v) = b.ack_batch(acks_for(&pop, "completed", None)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    q
}

fn assert_keys(v: &Value, keys: &[&str], what: &str) {
    for k in keys {
        assert!(v.get(*k).is_some(), "{what}: no key {k} in {v}");
    }
}

#[tokio::test]
async fn a_sampling_broker_records_its_traffic_and_status_shows_it() {
    // Its stats/refresh replaces the minute's snapshot of every queue: another test's
    // refresh, its queues read before this one's were written, would replace it back.
    common::exclusive().await;
    let (b, name) = sampling().await;
    let q = traffic(&b, 30, 10).await;
    wait_sampled(&name, 30, 10).await;
    // The queue snapshot: filed now, over this minute's.
    let (s, v) = b.post("/api/v1/stats/refresh", &json!({})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["success"], true);

    // The whole system: the dashboard's keys (Dashboard.vue reads messages.*,
    // deadLetterQueue.*, leases.* and throughput[].*PerSecond).
    let (s, v) = b.get("/api/v1/status").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_keys(
        &v,
        &[
            "timeRange",
            "bucketMinutes",
            "pointCount",
            "throughput",
            "queues",
            "messages",
            "leases",
            "deadLetterQueue",
            "workers",
            "errors",
            "statsAge",
        ],
        "status",
    );
    assert_eq!(v["bucketMinutes"], 1);
    assert_keys(
        &v["messages"],
        &[
            "total",
            "pending",
            "processing",
            "completed",
            "failed",
            "deadLetter",
            "requests",
            "batchEfficiency",
        ],
        "status.messages",
    );
    assert_keys(
        &v["leases"],
        &[
            "active",
            "partitionsWithLeases",
            "totalBatchSize",
            "totalAcked",
        ],
        "leases",
    );
    assert_keys(
        &v["deadLetterQueue"],
        &["totalMessages", "affectedPartitions", "topErrors"],
        "dlq",
    );
    assert!(v["deadLetterQueue"]["topErrors"].is_array());
    let t = v["throughput"].as_array().expect("throughput array");
    assert!(!t.is_empty(), "{v}");
    for p in t {
        assert_keys(
            p,
            &[
                "timestamp",
                "ingested",
                "processed",
                "popMessages",
                "ingestedPerSecond",
                "processedPerSecond",
                "popPerSecond",
                "avgLagMs",
                "maxLagMs",
                "dbErrors",
                "ackFailed",
                "dlqCount",
                "queenCpuUserPct",
                "queenCpuSysPct",
                "queenRssMb",
                "dbPoolActive",
                "dbPoolIdle",
                "dbPoolSize",
            ],
            "throughput[]",
        );
        assert!(p["ingestedPerSecond"].is_number());
    }
    let ingested: i64 = t.iter().map(|p| p["ingested"].as_i64().unwrap()).sum();
    assert!(ingested >= 30, "this broker's 30 pushes are in: {ingested}");
    assert!(v["statsAge"].as_i64().unwrap() >= 0, "a snapshot was filed");
    assert!(
        v["workers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["workerId"] == name),
        "this broker is among the workers: {}",
        v["workers"]
    );
    assert!(v["messages"]["requests"]["push"].as_i64().unwrap() >= 1);

    // One queue: its own figures from the snapshot.
    let (s, v) = b.get(&format!("/api/v1/status?queue={q}")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let queues = v["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 1, "{v}");
    assert_eq!(queues[0]["name"], q.as_str());
    assert_eq!(queues[0]["partitions"], 1);
    assert_eq!(queues[0]["totalConsumed"], 10);
    assert_eq!(v["messages"]["total"], 30);
    assert_eq!(v["messages"]["pending"], 20);
    assert_eq!(v["messages"]["completed"], 10);
}

#[tokio::test]
async fn worker_and_system_metrics_are_this_brokers_samples() {
    let (b, name) = sampling().await;
    traffic(&b, 12, 4).await;
    wait_sampled(&name, 12, 4).await;

    let (s, v) = b
        .get(&format!("/api/v1/analytics/worker-metrics?workerId={name}"))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_keys(
        &v,
        &[
            "timeRange",
            "bucketMinutes",
            "pointCount",
            "timeSeries",
            "workers",
            "queues",
            "summary",
        ],
        "worker-metrics",
    );
    assert_eq!(v["summary"]["totalPushMessages"], 12, "{v}");
    assert_eq!(v["summary"]["totalAckMessages"], 4);
    assert_eq!(v["summary"]["totalPushRequests"], 1);
    let ts = v["timeSeries"].as_array().unwrap();
    assert!(!ts.is_empty());
    assert_keys(
        &ts[0],
        &[
            "timestamp",
            "pushMessages",
            "popMessages",
            "ackMessages",
            "pushRequests",
            "popRequests",
            "ackRequests",
            "pushPerSecond",
            "popPerSecond",
            "ackPerSecond",
            "dbErrors",
            "ackFailed",
            "dlqCount",
        ],
        "timeSeries[]",
    );

    let (s, v) = b
        .get(&format!("/api/v1/analytics/system-metrics?workerId={name}"))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_keys(
        &v,
        &[
            "timeRange",
            "replicas",
            "replicaCount",
            "bucketMinutes",
            "pointCount",
        ],
        "system-metrics",
    );
    assert_eq!(v["replicaCount"], 1, "{v}");
    let r = &v["replicas"][0];
    assert_eq!(r["workerId"], name.as_str());
    let m = &r["timeSeries"][0]["metrics"];
    // Dashboard.vue charts metrics.cpu.user_us.avg and system_us.avg.
    assert!(m["cpu"]["user_us"]["avg"].is_number(), "{m}");
    assert!(m["cpu"]["system_us"]["avg"].is_number(), "{m}");
    assert!(
        m["memory"]["rss_bytes"]["avg"].as_f64().unwrap() > 0.0,
        "{m}"
    );
    assert!(m["database"]["pool_size"]["avg"].is_number(), "{m}");
    assert!(r["timeSeries"][0]["sampleCount"].as_i64().unwrap() >= 1);
}

/// A long-poll parked on a queue is sampled per queue and broker: Queen's
/// queue-parked-replicas (`series[]`: bucket, queueName, hostname, workerId,
/// parkedCount; `replicas[]`: hostname, workerId) and queue-ops' `parkedCount` show it.
#[tokio::test]
async fn a_parked_long_poll_is_sampled_per_queue_and_broker() {
    // Its stats/refresh replaces the minute's snapshot of every queue: another test's
    // refresh, its queues read before this one's were written, would replace it back.
    common::exclusive().await;
    let (b, name) = sampling().await;
    let q = unique("parked");
    b.configure(&q, json!({})).await;
    let url = format!("{}/api/v1/pop/queue/{q}?wait=true&timeout=30000", b.base);
    let poll = tokio::spawn(b.http.get(url).send());
    // While it is parked: a queue snapshot filed now (the refresh), and the sampler's
    // parked row of the same minute (a minute that ends first: filed again).
    let db = admin().await;
    let parked_in = |bucket: chrono::DateTime<chrono::Utc>| {
        let (db, name, q) = (&db, &name, &q);
        async move {
            let n: i64 = db
                .query_one(
                    "SELECT count(*) FROM queen.history_parked
                      WHERE broker = $1 AND queue = $2 AND bucket = $3",
                    &[name, q, &bucket],
                )
                .await
                .unwrap()
                .get(0);
            n > 0
        }
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    'filed: loop {
        assert!(
            Instant::now() < deadline,
            "the parked long-poll was not sampled"
        );
        let (s, v) = b.post("/api/v1/stats/refresh", &json!({})).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        let bucket: chrono::DateTime<chrono::Utc> = db
            .query_one(
                "SELECT max(bucket) FROM queen.history_queues WHERE queue = $1",
                &[&q],
            )
            .await
            .unwrap()
            .get(0);
        for _ in 0..20 {
            if parked_in(bucket).await {
                break 'filed;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let (s, v) = b
        .get(&format!("/api/v1/analytics/queue-ops?queue={q}"))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let ops = v["series"].as_array().unwrap();
    assert!(
        ops.iter().any(|p| p["parkedCount"].as_f64().unwrap() > 0.0),
        "{v}"
    );
    // The push releases it: nothing waits for its timeout.
    b.push(json!([{"queue": q, "payload": {"n": 1}}])).await;
    let answered = poll.await.unwrap().unwrap();
    assert_eq!(answered.status(), StatusCode::OK);

    let (s, v) = b
        .get(&format!(
            "/api/v1/analytics/queue-parked-replicas?queue={q}"
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_keys(
        &v,
        &["timeRange", "bucketMinutes", "series", "replicas"],
        "queue-parked-replicas",
    );
    let series = v["series"].as_array().unwrap();
    assert!(!series.is_empty(), "{v}");
    assert_keys(
        &series[0],
        &["bucket", "queueName", "hostname", "workerId", "parkedCount"],
        "series[]",
    );
    assert!(series.iter().all(|p| p["queueName"] == q.as_str()), "{v}");
    assert_eq!(series[0]["workerId"], name.as_str());
    let parked = series[0]["parkedCount"].as_f64().unwrap();
    assert!(
        parked > 0.0 && parked <= 1.0,
        "one long-poll, averaged: {v}"
    );
    assert_eq!(
        v["replicas"],
        json!([{"hostname": series[0]["hostname"], "workerId": name}])
    );
    // Another queue's filter sees none of it.
    let (s, v) = b
        .get(&format!(
            "/api/v1/analytics/queue-parked-replicas?queue={}",
            unique("none")
        ))
        .await;
    assert_eq!(
        (s, v["series"].clone(), v["replicas"].clone()),
        (StatusCode::OK, json!([]), json!([]))
    );
}

/// Two snapshots filed a minute apart: a bucket's traffic is the growth from the
/// snapshot before it, never negative, and its lag and depth are its own snapshot's.
#[tokio::test]
async fn queue_traffic_is_the_growth_between_snapshots() {
    let b = start_with(|_| {}).await;
    let db = admin().await;
    let q = unique("snap");
    let id = uuid::Uuid::new_v4();
    let row = |pushed: i64, consumed: i64, lag: i64| {
        json!([{"queueId": id, "queue": q, "partitions": 3, "groups": 1, "messages": lag,
                "pushed": pushed, "consumed": consumed, "lag": lag, "oldestAgeS": 7, "dlq": 2}])
    };
    // 20, 10 and 5 minutes ago: the last one after the queue lost a partition (pushed
    // fell), which counts 0, not a negative.
    for (ago, r) in [
        (20, row(100, 40, 60)),
        (10, row(160, 150, 10)),
        (5, row(90, 150, 0)),
    ] {
        db.execute(
            "SELECT queen.history_queues_v1($1::jsonb, now() - $2::int * interval '1 minute', true)",
            &[&r, &ago],
        )
        .await
        .unwrap();
    }
    let (s, v) = b
        .get(&format!(
            "/api/v1/analytics/queue-ops?queue={q}&from={}",
            urlencode(&(chrono::Utc::now() - chrono::Duration::minutes(15)))
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["queues"], json!([q]));
    let series = v["series"].as_array().unwrap();
    assert_eq!(series.len(), 2, "{v}");
    assert_keys(
        &series[0],
        &[
            "bucket",
            "queueName",
            "pushMessages",
            "popMessages",
            "popEmpty",
            "partitionsCreated",
            "partitionsDeleted",
            "parkedCount",
            "pushPerSecond",
        ],
        "series[]",
    );
    assert_eq!(series[0]["pushMessages"], 60);
    assert_eq!(series[0]["popMessages"], 110);
    assert_eq!(series[0]["partitionCount"], 3);
    assert_eq!(series[0]["pushPerSecond"], 1.0);
    assert_eq!(
        series[1]["pushMessages"], 0,
        "a shrinking count is no traffic"
    );
    assert_eq!(series[1]["lag"], 0);

    let (s, v) = b
        .get(&format!("/api/v1/analytics/queue-lag?queue={q}"))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let lag = v.as_array().unwrap();
    assert_eq!(lag.len(), 3);
    assert_eq!(lag[0]["maxLagMs"], 7000, "newest first: {v}");
    assert_keys(
        &lag[0],
        &[
            "queueName",
            "popCount",
            "avgLagMs",
            "maxLagMs",
            "bucketTime",
        ],
        "queue-lag[]",
    );

    // /status/analytics: every hour of the last day, the pushes in their hour.
    let (s, v) = b
        .get(&format!(
            "/api/v1/status/analytics?queue={q}&interval=minute&from={}",
            urlencode(&(chrono::Utc::now() - chrono::Duration::minutes(30)))
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["interval"], "minute");
    let points = v["dataPoints"].as_array().unwrap();
    assert!(points.len() >= 30, "{}", points.len());
    let total: i64 = points.iter().map(|p| p["messages"].as_i64().unwrap()).sum();
    assert_eq!(
        total, 60,
        "the 10-minute-ago growth; the first snapshot has none before it"
    );
    db.execute(
        "DELETE FROM queen.history_queues WHERE queue_id = $1",
        &[&id],
    )
    .await
    .unwrap();
}

fn urlencode(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// run_maintenance files what it removed; the retention series adds it up exactly.
#[tokio::test]
async fn retention_counts_what_the_lifecycle_removed() {
    let b = start_with(|_| {}).await;
    let db = admin().await;
    // Six days ago (inside the history's 7 days), at a second no real run shares.
    let at: chrono::DateTime<chrono::Utc> = db
        .query_one(
            "SELECT date_trunc('second', now() - interval '6 days') + random() * interval '50 ms'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    for report in [
        json!({"messages": 40, "expiredMessages": 5, "evicted": 3, "segments": 4, "sidecarRows": 9, "durationMs": 2.5}),
        json!({"messages": 2, "expiredMessages": 0, "evicted": 0, "segments": 1, "sidecarRows": 0, "durationMs": 1}),
    ] {
        db.execute(
            "SELECT queen.history_lifecycle_v1($1::jsonb, $2::timestamptz)",
            &[&report, &at],
        )
        .await
        .unwrap();
    }
    let from = urlencode(&at);
    let to = (at + chrono::Duration::seconds(1))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let (s, v) = b
        .get(&format!("/api/v1/analytics/retention?from={from}&to={to}"))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_keys(
        &v,
        &["timeRange", "bucketMinutes", "series", "totals"],
        "retention",
    );
    let t = &v["totals"];
    assert_eq!(t["totalMsgs"], 42, "{v}");
    assert_eq!(t["retentionMsgs"], 37);
    assert_eq!(t["expiredMsgs"], 5);
    assert_eq!(t["evictionMsgs"], 3);
    assert_eq!(t["eventCount"], 2);
    db.execute("DELETE FROM queen.history_lifecycle WHERE at = $1", &[&at])
        .await
        .unwrap();

    // A real run files its report too.
    let before: i64 = db
        .query_one("SELECT count(*) FROM queen.history_lifecycle", &[])
        .await
        .unwrap()
        .get(0);
    db.batch_execute("CALL queen.run_maintenance()")
        .await
        .unwrap();
    let after: i64 = db
        .query_one("SELECT count(*) FROM queen.history_lifecycle", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        after > before || after >= 1,
        "run_maintenance filed its report"
    );
}

#[tokio::test]
async fn postgres_stats_and_shared_state_answer_in_queens_keys() {
    let b = start_with(|_| {}).await;
    let (s, v) = b.get("/api/v1/analytics/postgres-stats").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_keys(
        &v,
        &[
            "timestamp",
            "database",
            "databaseCache",
            "tableCache",
            "indexCache",
            "cacheSummary",
            "deadTuples",
            "hotUpdates",
            "activeQueries",
            "autovacuumStatus",
            "bufferConfig",
            "bufferUsage",
            "tableSizes",
        ],
        "postgres-stats",
    );
    assert!(v["tableSizes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["table"] == "log_segments"));
    let (s, v) = b.get("/api/v1/system/shared-state").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["enabled"], true);
    assert_eq!(v["transport"], "database");
    assert_eq!(v["maintenanceMode"], false);
}

#[tokio::test]
async fn bad_ranges_are_refused_naming_the_parameter() {
    let b = start_with(|_| {}).await;
    for (path, param) in [
        ("/api/v1/status?from=yesterday", "from"),
        ("/api/v1/status?to=2026-13-01T00:00:00Z", "to"),
        (
            "/api/v1/analytics/queue-ops?from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z",
            "from",
        ),
        (
            "/api/v1/analytics/worker-metrics?from=1990-01-01T00:00:00Z",
            "from",
        ),
        ("/api/v1/status/analytics?interval=week", "interval"),
    ]
    .map(|(p, n)| (p.to_string(), n))
    .into_iter()
    .chain([(
        format!(
            "/api/v1/status/analytics?interval=minute&from={}",
            urlencode(&(chrono::Utc::now() - chrono::Duration::days(30)))
        ),
        "interval",
    )]) {
        let path = path.as_str();
        let (s, v) = b.get(path).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{path}: {v}");
        assert_eq!(v["parameter"], param, "{path}: {v}");
    }
}

/// `GET /api/v1/status/queues/{queue}/messages`: newest first, Queen's keys, the
/// queue-mode status of each; a queue nobody has is an empty page.
#[tokio::test]
async fn queue_messages_carry_queens_statuses() {
    let b = start_with(|_| {}).await;
    let q = unique("qm");
    b.configure(&q, json!({"leaseTime": 60})).await;
    let items: Vec<Value> = (0..3)
        .map(|i| json!({"queue": q, "transactionId": format!("m{i}"), "payload": i}))
        .collect();
    b.push(json!(items)).await;
    let first = b.pop(&q, "batch=1").await.expect("pop");
    let (s, _) = b.ack_batch(acks_for(&first, "completed", None)).await;
    assert_eq!(s, StatusCode::OK);
    b.pop(&q, "batch=1").await.expect("a second lease");
    let (s, v) = b.get(&format!("/api/v1/status/queues/{q}/messages")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let got: Vec<(String, String)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            assert_keys(
                m,
                &[
                    "id",
                    "transactionId",
                    "partitionId",
                    "queuePath",
                    "queue",
                    "partition",
                    "status",
                    "createdAt",
                ],
                "message",
            );
            (
                m["transactionId"].as_str().unwrap().into(),
                m["status"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want = [("m2", "pending"), ("m1", "processing"), ("m0", "completed")];
    assert_eq!(got, want.map(|(t, s)| (t.to_string(), s.to_string())));
    let (s, v) = b
        .get(&format!(
            "/api/v1/status/queues/{q}/messages?limit=1&offset=2"
        ))
        .await;
    assert_eq!(
        (s, v[0]["transactionId"].clone()),
        (StatusCode::OK, json!("m0"))
    );
    let (s, v) = b
        .get(&format!(
            "/api/v1/status/queues/{}/messages",
            unique("nobody")
        ))
        .await;
    assert_eq!((s, v), (StatusCode::OK, json!([])));
    let (s, v) = b
        .get(&format!("/api/v1/status/queues/{q}/messages?limit=5000"))
        .await;
    assert_eq!(
        (s, v["parameter"].clone()),
        (StatusCode::BAD_REQUEST, json!("limit"))
    );
}
