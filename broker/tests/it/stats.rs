//! `/metrics` (Prometheus text) and the fusion cross-check against pg_stat_statements
//! (broker.md §4: log_ack_multi_v1 calls far below the number of acks).

use crate::common;

use std::time::Duration;

use common::{acks_for, admin, metric, parse_metrics, start, start_with, unique, Broker};
use serde_json::{json, Value};

async fn metrics_text(b: &Broker) -> String {
    let r = b
        .http
        .get(format!("{}/metrics", b.base))
        .send()
        .await
        .expect("metrics");
    assert_eq!(r.status(), 200);
    let ct = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ct.starts_with("text/plain"), "{ct}");
    r.text().await.unwrap()
}

#[tokio::test]
async fn metrics_expose_every_family_and_counters_move() {
    common::exclusive().await;
    let b = start().await;
    let text = metrics_text(&b).await;
    for (name, kind) in [
        ("queen_http_requests_total", "counter"),
        ("queen_http_request_duration_seconds", "histogram"),
        ("queen_acks_total", "counter"),
        ("queen_ack_registry_hits_total", "counter"),
        ("queen_ack_registry_misses_total", "counter"),
        ("queen_ack_registry_entries", "gauge"),
        ("queen_ack_registry_bytes", "gauge"),
        ("queen_ack_registry_evictions_total", "counter"),
        ("queen_ack_fusion_commits_total", "counter"),
        ("queen_ack_fusion_rows_total", "counter"),
        ("queen_ack_fusion_acks_total", "counter"),
        ("queen_ack_fusion_rejected_rows_total", "counter"),
        ("queen_ack_fusion_failed_flushes_total", "counter"),
        ("queen_db_pool_in_use", "gauge"),
        ("queen_db_pool_max", "gauge"),
        ("queen_messages_pushed_total", "counter"),
        ("queen_messages_popped_total", "counter"),
        ("queen_dlq_filed_total", "counter"),
        ("queen_http_connections_rejected_total", "counter"),
        ("queen_http_body_timeouts_total", "counter"),
        ("queen_dedup_cache_bytes", "gauge"),
        ("queen_dedup_cache_loads_total", "counter"),
        ("queen_dedup_cache_skipped_total", "counter"),
        ("queen_dedup_cache_evictions_total", "counter"),
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} {kind}\n")),
            "{name} ({kind}) missing:\n{text}"
        );
    }
    let m0 = parse_metrics(&text);
    for k in [
        "queen_acks_total{path=\"fast\"}",
        "queen_acks_total{path=\"sql\"}",
        "queen_ack_registry_hits_total",
        "queen_ack_registry_entries",
        "queen_ack_fusion_commits_total",
        "queen_ack_fusion_rows_total",
    ] {
        assert_eq!(metric(&m0, k), 0.0, "{k}");
    }
    assert_eq!(metric(&m0, "queen_db_pool_max"), 4.0);

    let q = unique("metrics");
    b.push(json!([{"queue": q, "payload": 1}, {"queue": q, "payload": 2}]))
        .await;
    let pop = b.pop(&q, "batch=10").await.unwrap();
    let m1 = parse_metrics(&metrics_text(&b).await);
    assert_eq!(metric(&m1, "queen_ack_registry_entries"), 1.0);
    assert!(metric(&m1, "queen_ack_registry_bytes") > 0.0);
    assert_eq!(metric(&m1, "queen_messages_popped_total"), 2.0);
    let (_, v) = b.ack_batch(acks_for(&pop, "completed", None)).await;
    assert_eq!(v[0]["success"], true, "{v}");
    // An ack of something never delivered here takes the SQL path.
    let (_, v) = b
        .ack_batch(json!({"acknowledgments": [{"transactionId": "nope",
            "partitionId": pop["partitionId"], "status": "completed"}]}))
        .await;
    assert_eq!(v[0]["success"], false, "{v}");

    let text = metrics_text(&b).await;
    let m2 = parse_metrics(&text);
    assert_eq!(metric(&m2, "queen_acks_total{path=\"fast\"}"), 2.0);
    assert_eq!(metric(&m2, "queen_acks_total{path=\"sql\"}"), 1.0);
    assert_eq!(metric(&m2, "queen_ack_registry_hits_total"), 1.0);
    assert_eq!(metric(&m2, "queen_ack_registry_entries"), 0.0);
    // What is left is the (empty) entry table, which the cap also charges.
    assert!(metric(&m2, "queen_ack_registry_bytes") < metric(&m1, "queen_ack_registry_bytes"));
    // A lone ack found its fusion shard idle: one log_ack_at_v1 inline, no multi flush.
    assert_eq!(metric(&m2, "queen_ack_fusion_inline_total"), 1.0);
    assert_eq!(metric(&m2, "queen_ack_fusion_commits_total"), 0.0);
    assert_eq!(metric(&m2, "queen_ack_fusion_rows_total"), 0.0);
    assert_eq!(metric(&m2, "queen_ack_fusion_acks_total"), 0.0);
    assert_eq!(metric(&m2, "queen_messages_pushed_total"), 2.0);
    assert_eq!(metric(&m2, "queen_db_pool_in_use"), 0.0);
    assert!(metric(&m2, "queen_db_pool_size") >= 1.0);
    let ack_route = "method=\"POST\",route=\"/api/v1/ack/batch\"";
    assert_eq!(
        metric(
            &m2,
            &format!("queen_http_requests_total{{{ack_route},status=\"200\"}}")
        ),
        2.0
    );
    assert_eq!(
        metric(
            &m2,
            &format!("queen_http_request_duration_seconds_count{{{ack_route}}}")
        ),
        2.0
    );
    assert_eq!(
        metric(
            &m2,
            &format!("queen_http_request_duration_seconds_bucket{{{ack_route},le=\"+Inf\"}}")
        ),
        2.0
    );
    assert!(
        metric(
            &m2,
            &format!("queen_http_request_duration_seconds_sum{{{ack_route}}}")
        ) > 0.0
    );
    // Buckets are cumulative.
    let buckets: Vec<f64> = text
        .lines()
        .filter(|l| {
            l.starts_with("queen_http_request_duration_seconds_bucket") && l.contains(ack_route)
        })
        .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
        .collect();
    assert!(buckets.len() > 5 && buckets.windows(2).all(|w| w[0] <= w[1]));
}

#[tokio::test]
async fn registry_off_shows_in_metrics() {
    common::exclusive().await;
    let b = start_with(|c| c.ack_registry = false).await;
    let ms = parse_metrics(&metrics_text(&b).await);
    assert_eq!(metric(&ms, "queen_ack_registry_enabled"), 0.0);
    assert_eq!(metric(&ms, "queen_ack_fusion_enabled"), 0.0);
}

/// 64 concurrent consumers, each popping and acking its own partition a few times (all
/// pops of a round, then all acks together): every ack is answered after its flush commits
/// (or its inline call, when it found its shard idle), and PostgreSQL saw far fewer
/// log_ack_multi_v1 calls than acks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fusion_coalesces_concurrent_acks_per_pg_stat_statements() {
    common::exclusive().await;
    const CONSUMERS: usize = 64;
    const ROUNDS: usize = 4;
    let b = start_with(|c| c.pool_size = 8).await;
    let db = admin().await;
    let q = unique("coalesce");
    let items: Vec<Value> = (0..CONSUMERS)
        .flat_map(|i| (0..ROUNDS).map(move |k| (i, k)))
        .map(|(i, k)| json!({"queue": q, "partition": format!("p{i}"), "payload": k}))
        .collect();
    b.push(json!(items)).await;
    // Wherever the extension was created (the test cluster puts it in schema queen).
    let pgss: String = db
        .query_one(
            "SELECT quote_ident(extnamespace::regnamespace::text) FROM pg_extension
              WHERE extname = 'pg_stat_statements'",
            &[],
        )
        .await
        .expect("pg_stat_statements is installed")
        .get(0);
    db.execute(&format!("SELECT {pgss}.pg_stat_statements_reset()"), &[])
        .await
        .unwrap();
    // Each round: every consumer pops its batch, then all ack together.
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(CONSUMERS));
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|i| {
            let barrier = barrier.clone();
            let http = b.http.clone();
            let base = b.base.clone();
            let q = q.clone();
            tokio::spawn(async move {
                let mut acked = 0usize;
                for _ in 0..ROUNDS {
                    let r = http
                        .get(format!(
                            "{base}/api/v1/pop/queue/{q}/partition/p{i}?batch=1"
                        ))
                        .header("content-type", "application/json")
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(r.status(), 200);
                    let pop: Value = r.json().await.unwrap();
                    barrier.wait().await;
                    let v: Value = http
                        .post(format!("{base}/api/v1/ack/batch"))
                        .json(&acks_for(&pop, "completed", None))
                        .send()
                        .await
                        .unwrap()
                        .json()
                        .await
                        .unwrap();
                    assert_eq!(v[0]["success"], true, "{v}");
                    acked += 1;
                }
                acked
            })
        })
        .collect();
    let mut acks = 0;
    for c in consumers {
        acks += tokio::time::timeout(Duration::from_secs(120), c)
            .await
            .expect("consumers finish")
            .unwrap();
    }
    assert_eq!(acks, CONSUMERS * ROUNDS);
    let calls: i64 = db
        .query_one(
            &format!(
                "SELECT COALESCE(sum(calls), 0)::bigint FROM {pgss}.pg_stat_statements
                  WHERE query LIKE 'SELECT queen.log_ack_multi_v1(%'"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let ms = parse_metrics(&metrics_text(&b).await);
    let commits = metric(&ms, "queen_ack_fusion_commits_total");
    eprintln!("acks={acks} log_ack_multi_v1 calls={calls} fusion commits={commits}");
    assert_eq!(metric(&ms, "queen_acks_total{path=\"fast\"}"), acks as f64);
    // Each ack either found its shard idle (inline) or was parked and flushed.
    assert_eq!(
        metric(&ms, "queen_ack_fusion_acks_total") + metric(&ms, "queen_ack_fusion_inline_total"),
        acks as f64
    );
    assert!(
        calls > 0,
        "the fused flush never reached pg_stat_statements"
    );
    assert_eq!(calls as f64, commits, "every commit is one call");
    assert!(
        (calls as usize) < acks / 2,
        "log_ack_multi_v1 called {calls} times for {acks} acks"
    );
    // Nothing is left leased or unacked.
    let left = b.pop(&q, "batch=10").await;
    assert!(left.is_none(), "{left:?}");
}
