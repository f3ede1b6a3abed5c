//! Queen's admin views and the queue gauges over HTTP, checked against a
//! count by hand on a scenario with several consumer groups. The test database is shared
//! with other tests running at once, so every view is looked at for this test's queue
//! (and uniquely named groups) only.

use crate::common;

use common::{acks_for, metric, parse_metrics, start, start_with, unique, Broker};
use queen_broker::http::auth::sign;
use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

/// The scenario: queue `q` (retryLimit 0), 6 messages in Default, 2 in B.
/// - queue mode on Default: 2 consumed, then 1 leased now;
/// - group `g1` on Default: all 6 consumed;
/// - group `g2` on Default: offset 0 dead-lettered (committed 0, one DLQ row).
///
/// B has no cursor. By hand, Default: total 6; the slowest named group is g2 at 0, so
/// pending 5; processing 1 (the queue-mode lease); deadLetter 1; completed 6 − 5 − 1 = 0.
/// B: total 2, pending 2. Queue: total 8, pending 7, processing 1, completed 0,
/// deadLetter 1; net of processing (the list view) pending 6.
async fn scenario(b: &Broker, q: &str, g1: &str, g2: &str) {
    b.configure(q, json!({"retryLimit": 0})).await;
    let items: Vec<Value> = (0..6)
        .map(|i| json!({"queue": q, "payload": i, "transactionId": format!("t{i}")}))
        .chain((0..2).map(|i| json!({"queue": q, "partition": "B", "payload": i})))
        .collect();
    b.push(json!(items)).await;
    let part = |g: &str, n: usize| {
        format!("/api/v1/pop/queue/{q}/partition/Default?batch={n}&consumerGroup={g}")
    };
    let (_, qm) = b
        .get(&format!("/api/v1/pop/queue/{q}/partition/Default?batch=2"))
        .await;
    b.ack_batch(acks_for(&qm, "completed", None)).await;
    let (s, _) = b
        .get(&format!("/api/v1/pop/queue/{q}/partition/Default?batch=1"))
        .await;
    assert_eq!(s, StatusCode::OK);
    let (_, p1) = b.get(&part(g1, 10)).await;
    assert_eq!(p1["messages"].as_array().unwrap().len(), 6);
    b.ack_batch(json!({"consumerGroup": g1, "acknowledgments": acks_for(&p1, "completed", None)["acknowledgments"]})).await;
    let (_, p2) = b.get(&part(g2, 1)).await;
    let (_, v) = b
        .ack_batch(json!({"consumerGroup": g2, "acknowledgments": acks_for(&p2, "failed", Some("x"))["acknowledgments"]}))
        .await;
    assert_eq!(v[0]["dlq"], true, "{v}");
}

fn group<'a>(groups: &'a Value, name: &str) -> &'a Value {
    groups
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == name)
        .unwrap_or_else(|| panic!("group {name} missing in {groups}"))
}

#[tokio::test]
async fn queue_views_agree_with_a_count_by_hand_over_several_groups() {
    let b = start().await;
    let (q, g1, g2) = (unique("stats"), unique("g1"), unique("g2"));
    scenario(&b, &q, &g1, &g2).await;

    // The queue list (Queen's shape; pending net of processing).
    let (s, list) = b.get("/api/v1/resources/queues").await;
    assert_eq!(s, StatusCode::OK, "{list}");
    let mine = list["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == q.as_str())
        .expect("listed");
    assert_eq!(
        mine["messages"],
        json!({"total": 8, "pending": 6, "processing": 1, "completed": 0, "deadLetter": 1})
    );
    assert_eq!(
        (
            mine["partitions"].as_i64(),
            mine["queue"].as_str(),
            mine["storage"].as_str()
        ),
        (Some(2), Some(q.as_str()), Some("segments"))
    );
    assert_eq!(mine["options"]["retryLimit"], 0, "the stored options");
    let g = group(&mine["consumerGroups"], &g2);
    assert_eq!(
        (
            g["lag"].as_i64(),
            g["deadLetter"].as_i64(),
            g["partitions"].as_i64()
        ),
        (Some(5), Some(1), Some(1)),
        "{g}"
    );

    // The detail: per partition, Queen's figures and ours per group.
    let (s, d) = b.get(&format!("/api/v1/resources/queues/{q}")).await;
    assert_eq!(s, StatusCode::OK, "{d}");
    assert_eq!(
        d["totals"],
        json!({"total": 8, "pending": 7, "processing": 1, "completed": 0, "failed": null, "deadLetter": 1})
    );
    let parts = d["partitions"].as_array().unwrap();
    assert_eq!(
        parts
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["B", "Default"]
    );
    let (pb, pd) = (&parts[0], &parts[1]);
    assert_eq!(
        pb["messages"],
        json!({"total": 2, "pending": 2, "processing": 0, "completed": 0, "failed": null, "deadLetter": 0})
    );
    assert_eq!(
        pd["messages"],
        json!({"total": 6, "pending": 5, "processing": 1, "completed": 0, "failed": null, "deadLetter": 1})
    );
    assert_eq!(
        (pd["lastOffset"].as_i64(), pd["logStart"].as_i64()),
        (Some(5), Some(0))
    );
    assert!(
        pd["oldestMessage"].is_string()
            && pd["newestMessage"].is_string()
            && pd["lastActivity"].is_string(),
        "{pd}"
    );
    assert!(
        pb["consumerGroups"].as_array().unwrap().is_empty() && pb["oldestMessage"].is_string(),
        "{pb}"
    );
    let qm = group(&pd["consumerGroups"], "__QUEUE_MODE__");
    assert_eq!(
        (
            qm["committed"].as_i64(),
            qm["lag"].as_i64(),
            qm["leased"].as_bool(),
            qm["leasedMessages"].as_i64()
        ),
        (Some(1), Some(4), Some(true), Some(1)),
        "{qm}"
    );
    assert!(qm["workerId"].is_string(), "{qm}");
    let c1 = group(&pd["consumerGroups"], &g1);
    assert_eq!(
        (
            c1["committed"].as_i64(),
            c1["lag"].as_i64(),
            c1["totalConsumed"].as_i64(),
            &c1["oldestUnconsumedAt"]
        ),
        (Some(5), Some(0), Some(6), &Value::Null),
        "{c1}"
    );
    let c2 = group(&pd["consumerGroups"], &g2);
    assert_eq!(
        (
            c2["committed"].as_i64(),
            c2["lag"].as_i64(),
            c2["deadLetter"].as_i64(),
            c2["retries"].as_i64()
        ),
        (Some(0), Some(5), Some(1), Some(0)),
        "{c2}"
    );
    assert!(
        c2["oldestUnconsumedAgeSeconds"]
            .as_f64()
            .is_some_and(|a| a >= 0.0),
        "{c2}"
    );

    // Depth, whole queue and for one group (a partition it never read is wholly pending).
    let (_, depth) = b.get(&format!("/api/v1/resources/queues/{q}/depth")).await;
    assert_eq!(
        (
            depth["pending"].as_i64(),
            depth["processing"].as_i64(),
            depth["ready"].as_i64(),
            depth["partitionsPending"].as_i64()
        ),
        (Some(7), Some(1), Some(6), Some(2)),
        "{depth}"
    );
    let (_, depth) = b
        .get(&format!("/api/v1/resources/queues/{q}/depth?group={g1}"))
        .await;
    assert_eq!(
        (depth["pending"].as_i64(), depth["group"].as_str()),
        (Some(2), Some(g1.as_str())),
        "{depth}"
    );

    // Partitions, most pending first.
    let (_, ps) = b
        .get(&format!("/api/v1/resources/partitions?queue={q}"))
        .await;
    let pend: Vec<(String, i64)> = ps["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["partition"].as_str().unwrap().to_string(),
                p["pending"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(pend, [("Default".to_string(), 5), ("B".to_string(), 2)]);

    // Status views: pending not net of processing; the config holds the applied settings.
    let (_, st) = b.get(&format!("/api/v1/status/queues?queue={q}")).await;
    assert_eq!(
        st["queues"][0]["messages"],
        json!({"total": 8, "pending": 7, "processing": 1, "completed": 0, "deadLetter": 1})
    );
    let (_, sd) = b.get(&format!("/api/v1/status/queues/{q}")).await;
    assert_eq!(
        (
            sd["queue"]["config"]["retryLimit"].as_i64(),
            sd["queue"]["config"]["delayedProcessing"].as_i64()
        ),
        (Some(0), Some(0)),
        "{sd}"
    );
    assert_eq!(sd["totals"]["messages"]["pending"], 7);

    // Consumer groups.
    let (_, all) = b.get("/api/v1/consumer-groups").await;
    let e = all
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == g2.as_str() && x["queueName"] == q.as_str())
        .expect("g2");
    assert_eq!(
        (
            e["totalLag"].as_i64(),
            e["partitionCursors"].as_i64(),
            e["kind"].as_str()
        ),
        (Some(5), Some(1), Some("queen")),
        "{e}"
    );
    let (s, one) = b.get(&format!("/api/v1/consumer-groups/{g1}")).await;
    assert_eq!(s, StatusCode::OK, "{one}");
    assert_eq!(one[&q]["partitions"][0]["offsetLag"], 0, "{one}");
    let (_, lagging) = b
        .get("/api/v1/consumer-groups/lagging?minLagSeconds=0")
        .await;
    let mine: Vec<&Value> = lagging
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["queue_name"] == q.as_str())
        .collect();
    assert_eq!(mine.len(), 2, "queue mode and g2 lag on Default: {lagging}");

    // 404s, Queen's bodies.
    let (s, v) = b
        .get(&format!("/api/v1/resources/queues/{}", unique("nope")))
        .await;
    assert_eq!(
        (s, v),
        (StatusCode::NOT_FOUND, json!({"error": "Queue not found"}))
    );
    let (s, v) = b
        .get(&format!("/api/v1/consumer-groups/{}", unique("nobody")))
        .await;
    assert_eq!(
        (s, v),
        (
            StatusCode::NOT_FOUND,
            json!({"error": "Consumer group not found"})
        )
    );
    let (_, ov) = b.get("/api/v1/resources/overview").await;
    assert!(
        ov["queues"].as_i64().unwrap() >= 1 && ov["messages"]["total"].as_i64().unwrap() >= 8,
        "{ov}"
    );
    assert!(
        ov["lag"]["time"]["max"].is_i64() && ov["statsAge"] == 0,
        "{ov}"
    );
}

#[tokio::test]
async fn metrics_carry_the_same_figures_per_queue_and_group() {
    // The shared test database holds every test's queues: no folding here.
    let b = start_with(|c| c.metrics_queue_series = 1_000_000).await;
    let (q, g1, g2) = (unique("stats-m"), unique("g1"), unique("g2"));
    scenario(&b, &q, &g1, &g2).await;
    let text = b
        .http
        .get(format!("{}/metrics", b.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let m = parse_metrics(&text);
    let t = "00000000-0000-0000-0000-000000000001";
    let key = |name: &str, g: &str| format!("{name}{{tenant=\"{t}\",queue=\"{q}\",group=\"{g}\"}}");
    assert_eq!(metric(&m, "queen_queue_stats_up"), 1.0);
    assert_eq!(metric(&m, &key("queen_consumer_lag_messages", &g2)), 5.0);
    assert_eq!(metric(&m, &key("queen_consumer_dlq_messages", &g2)), 1.0);
    assert_eq!(metric(&m, &key("queen_consumer_lag_messages", &g1)), 0.0);
    assert_eq!(
        metric(&m, &key("queen_consumer_leased_messages", "__QUEUE_MODE__")),
        1.0
    );
    assert!(
        metric(
            &m,
            &key("queen_consumer_oldest_unconsumed_age_seconds", &g2)
        ) >= 0.0
    );
    let qkey = |name: &str| format!("{name}{{tenant=\"{t}\",queue=\"{q}\"}}");
    assert_eq!(metric(&m, &qkey("queen_queue_messages")), 8.0);
    assert_eq!(metric(&m, &qkey("queen_queue_pending_messages")), 7.0);
    assert_eq!(metric(&m, &qkey("queen_queue_dlq_messages")), 1.0);
    assert_eq!(metric(&m, &qkey("queen_queue_partitions")), 2.0);
    for family in [
        "queen_consumer_lag_messages",
        "queen_queue_messages",
        "queen_queue_series_folded",
    ] {
        assert!(
            text.contains(&format!("# TYPE {family} gauge\n")),
            "{family}"
        );
    }
}

#[tokio::test]
async fn metrics_say_so_when_the_statistics_cannot_be_read() {
    let b = start_with(|c| c.database_url = "postgres://postgres@127.0.0.1:1/none".into()).await;
    let text = b
        .http
        .get(format!("{}/metrics", b.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(metric(&parse_metrics(&text), "queen_queue_stats_up"), 0.0);
}

const SECRET: &str = "stats-tenancy-secret";

#[tokio::test]
async fn another_tenants_queues_are_not_listed_and_their_detail_is_not_found() {
    let base = start_with(|c| c.auth = Some(queen_broker::config::AuthConfig::hs256(SECRET))).await;
    let token = |t: Uuid| sign(SECRET.as_bytes(), &json!({"tenant": t, "role": "admin"}));
    let (a, other) = (
        base.with_token(&token(Uuid::new_v4())),
        base.with_token(&token(Uuid::new_v4())),
    );
    let q = unique("stats-tenant");
    a.push(json!([{"queue": q, "payload": 1}])).await;
    let (_, mine) = a.get("/api/v1/resources/queues").await;
    assert_eq!(mine["queues"].as_array().unwrap().len(), 1, "{mine}");
    let (_, theirs) = other.get("/api/v1/resources/queues").await;
    assert!(theirs["queues"].as_array().unwrap().is_empty(), "{theirs}");
    for path in [
        format!("/api/v1/resources/queues/{q}"),
        format!("/api/v1/status/queues/{q}"),
        format!("/api/v1/resources/queues/{q}/depth"),
    ] {
        let (s, v) = other.get(&path).await;
        assert_eq!(
            (s, v),
            (StatusCode::NOT_FOUND, json!({"error": "Queue not found"})),
            "{path}"
        );
    }
    let (s, _) = base.get("/api/v1/resources/queues").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
}
