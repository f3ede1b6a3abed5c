//! The broker's maintenance loop: it runs `queen.run_maintenance()` by itself,
//! as the least-privilege role, and /metrics says what it did.

use crate::common;

use std::time::{Duration, Instant};

use common::{admin, metric, metrics, start_with, unique};
use serde_json::json;

/// Polls `check` every 100 ms for up to 15 s.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(15);
    while !check().await {
        assert!(Instant::now() < deadline, "not within 15 s: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_loop_enforces_retention_by_itself_and_counts_it() {
    // The loop runs maintenance database-wide (retention of every queue, the advisory
    // lock every runner takes): no other test runs meanwhile.
    common::exclusive().await;
    let b = start_with(|c| c.maintenance_interval_ms = 200).await;
    let db = admin().await;
    let q = unique("maint-loop");
    b.configure(&q, json!({"retentionSeconds": 1})).await;
    for t in ["a", "b", "c"] {
        b.push(json!([{"queue": q, "payload": t, "transactionId": t}]))
            .await;
    }
    // Group g consumes the first message only: retention takes the other two from it.
    let pop = b.pop(&q, "consumerGroup=g&batch=1").await.expect("a");
    let acks = common::acks_for(&pop, "completed", None)["acknowledgments"].clone();
    let (s, v) = b
        .ack_batch(json!({"consumerGroup": "g", "acknowledgments": acks}))
        .await;
    assert!(s.is_success() && v[0]["success"] == true, "{v}");
    let stored = |q: String| {
        let db = &db;
        async move {
            let r = db
                .query_one(
                    "SELECT (SELECT sum(segments)::bigint FROM queen.partition_storage WHERE queue = $1),
                            (SELECT sum(evicted)::bigint FROM queen.consumer_lag WHERE queue = $1)",
                    &[&q],
                )
                .await
                .unwrap();
            (r.get::<_, Option<i64>>(0), r.get::<_, Option<i64>>(1))
        }
    };
    assert_eq!(stored(q.clone()).await, (Some(3), Some(0)));
    eventually("the loop deleted the expired segments", || async {
        stored(q.clone()).await == (Some(0), Some(2))
    })
    .await;
    let m = metrics(&b).await;
    assert!(metric(&m, "queen_maintenance_runs_total{result=\"ran\"}") >= 1.0);
    assert!(
        metric(
            &m,
            "queen_maintenance_segments_deleted_total{rule=\"expired\"}"
        ) >= 3.0
    );
    assert!(
        metric(
            &m,
            "queen_maintenance_messages_deleted_total{rule=\"expired\"}"
        ) >= 3.0
    );
    assert!(metric(&m, "queen_maintenance_messages_evicted_total") >= 2.0);
    let last = metric(&m, "queen_maintenance_last_run_timestamp_seconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(now - last < 15.0, "last run {last}, now {now}");
    assert_eq!(
        metric(&m, "queen_maintenance_runs_total{result=\"failed\"}"),
        0.0
    );
}

#[tokio::test]
async fn a_run_that_finds_the_lock_taken_is_counted_as_skipped() {
    // It holds the lock every runner of maintenance takes: no other test runs meanwhile.
    common::exclusive().await;
    // Another runner (another broker, pg_cron) holds the advisory lock run_maintenance
    // takes: this broker skips, then runs once it is free.
    let holder = admin().await;
    holder
        .batch_execute("BEGIN; SELECT pg_advisory_xact_lock(1903519086, 1)")
        .await
        .unwrap();
    let b = start_with(|c| c.maintenance_interval_ms = 100).await;
    eventually("a skipped run", || async {
        metric(
            &metrics(&b).await,
            "queen_maintenance_runs_total{result=\"skipped\"}",
        ) >= 1.0
    })
    .await;
    let m = metrics(&b).await;
    assert_eq!(
        metric(&m, "queen_maintenance_runs_total{result=\"ran\"}"),
        0.0
    );
    assert!(!m.contains_key("queen_maintenance_last_run_timestamp_seconds"));
    holder.batch_execute("COMMIT").await.unwrap();
    eventually("a run once the lock is free", || async {
        metric(
            &metrics(&b).await,
            "queen_maintenance_runs_total{result=\"ran\"}",
        ) >= 1.0
    })
    .await;
}

#[tokio::test]
async fn interval_zero_never_runs() {
    let b = start_with(|c| c.maintenance_interval_ms = 0).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let m = metrics(&b).await;
    let runs: f64 = ["ran", "skipped", "failed"]
        .iter()
        .map(|r| {
            metric(
                &m,
                &format!("queen_maintenance_runs_total{{result=\"{r}\"}}"),
            )
        })
        .sum();
    assert_eq!(runs, 0.0);
}
