//! A queue-level pop (and a namespace pop) answers empty only when no partition it may
//! serve has ready, unleased messages (docs/decisions.md, "Which partitions a queue pop tries").
//! Concurrent pops are stood in for by a transaction holding the lease rows of most
//! partitions FOR UPDATE, as a pop in flight does while it serves them: deterministic,
//! no sleeps.

use crate::common;

use common::{admin, start, unique, Broker};
use serde_json::{json, Value};

/// Partitions in the test queue: more than one page of candidates (4 × 1 + 8).
const PARTITIONS: usize = 20;

async fn pids(q: &str) -> Vec<uuid::Uuid> {
    admin()
        .await
        .query(
            "SELECT p.id FROM queen.log_partitions p JOIN queen.queues qu ON qu.id = p.queue_id
              WHERE qu.name = $1 ORDER BY p.id",
            &[&q],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// `n` messages in each partition of `q`, and every partition's queue-mode cursor made
/// by one auto-acked partition pop (so each keeps `n - 1` ready).
async fn filled(b: &Broker, q: &str, n: usize) {
    let items: Vec<Value> = (0..PARTITIONS * n)
        .map(|i| {
            json!({"queue": q, "partition": format!("p{}", i % PARTITIONS),
                   "payload": i, "transactionId": format!("{q}-{i}")})
        })
        .collect();
    b.push(json!(items)).await;
    for p in 0..PARTITIONS {
        let (s, v) = b
            .get(&format!(
                "/api/v1/pop/queue/{q}/partition/p{p}?autoAck=true&batch=1"
            ))
            .await;
        assert_eq!(s, reqwest::StatusCode::OK, "{v}");
    }
}

fn partition_id(v: &Value) -> uuid::Uuid {
    v["messages"][0]["partitionId"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// Holds the queue-mode lease rows of `pids` FOR UPDATE in `tx`, as pops in flight do:
/// one statement per partition (on Citus a row lock must name its shard's key).
async fn hold(tx: &tokio_postgres::Transaction<'_>, pids: &[uuid::Uuid]) {
    for pid in pids {
        tx.execute(
            "SELECT 1 FROM queen.log_leases
              WHERE consumer_group = '__QUEUE_MODE__' AND partition_id = $1 FOR UPDATE",
            &[pid],
        )
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn a_queue_pop_goes_past_a_page_of_locked_candidates_and_is_empty_only_when_none_is_free() {
    let b = start().await;
    let ns = unique("emptypop");
    let q = format!("{ns}.a");
    filled(&b, &q, 4).await;
    let ids = pids(&q).await;
    assert_eq!(ids.len(), PARTITIONS);
    // Every partition but the last by id held as a pop in flight holds it: the first
    // page of candidates (ordered by id among partitions never leased) is all locked.
    let free = *ids.last().unwrap();
    let mut db = admin().await;
    let tx = db.transaction().await.unwrap();
    hold(&tx, &ids[..ids.len() - 1]).await;
    let v = b
        .pop(&q, "autoAck=true&batch=1")
        .await
        .expect("a queue pop serves the free partition behind a page of locked ones");
    assert_eq!(partition_id(&v), free, "{v}");
    let (s, v) = b
        .get(&format!("/api/v1/pop?namespace={ns}&autoAck=true&batch=1"))
        .await;
    assert_eq!(s, reqwest::StatusCode::OK, "a namespace pop too: {v}");
    assert_eq!(partition_id(&v), free, "{v}");
    // Its last message leased: every ready partition is now leased or locked.
    let v = b.pop(&q, "batch=1").await.expect("the last one, leased");
    assert_eq!(partition_id(&v), free, "{v}");
    assert!(b.pop(&q, "autoAck=true&batch=1").await.is_none());
    let (s, v) = b
        .get(&format!("/api/v1/pop?namespace={ns}&autoAck=true&batch=1"))
        .await;
    assert_eq!(s, reqwest::StatusCode::NO_CONTENT, "{v}");
    // The pops in flight end: their partitions serve again.
    tx.rollback().await.unwrap();
    let v = b.pop(&q, "autoAck=true&batch=1").await.expect("served");
    assert_ne!(partition_id(&v), free, "{v}");
}

#[tokio::test]
async fn a_queue_pop_with_several_partitions_takes_the_free_ones_behind_locked_ones() {
    let b = start().await;
    let q = unique("emptypopn");
    filled(&b, &q, 2).await;
    let ids = pids(&q).await;
    // The first 18 by id locked: a pop of up to 2 partitions reads a page of 16
    // candidates, all locked, then the rest, and serves both free ones.
    let mut db = admin().await;
    let tx = db.transaction().await.unwrap();
    hold(&tx, &ids[..18]).await;
    let v = b
        .pop(&q, "autoAck=true&batch=10&partitions=2")
        .await
        .expect("served");
    let served: Vec<uuid::Uuid> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["partitionId"].as_str().unwrap().parse().unwrap())
        .collect();
    let mut partitions = served.clone();
    // In the order tried: the broker's hints (its pushes) come before the pages.
    partitions.sort();
    partitions.dedup();
    assert_eq!(partitions, ids[18..].to_vec(), "{v}");
    tx.rollback().await.unwrap();
}

/// A queue pop passes the partitions this broker pushed to lately as hints
/// (crate::engine::hints); a hint left from a deleted queue names no partition of the
/// queue that replaced it and is dropped, and the new message is served.
#[tokio::test]
async fn a_stale_hint_from_a_deleted_queue_is_dropped_and_the_new_message_served() {
    let b = common::start().await;
    let q = common::unique("hint-stale");
    let push = |t: &str| json!([{"queue": q, "partition": "p", "transactionId": t, "payload": t}]);
    b.push(push("old")).await;
    let (s, v) = b.delete(&format!("/api/v1/resources/queues/{q}")).await;
    assert!(s.is_success(), "{s} {v}");
    b.push(push("new")).await;
    assert_eq!(
        b.state
            .hints
            .of(queen_log::conventions::DEFAULT_TENANT, &q)
            .len(),
        2,
        "the old and the new partition"
    );
    let (s, v) = b
        .get(&format!("/api/v1/pop/queue/{q}?batch=10&wait=false"))
        .await;
    assert_eq!(s, reqwest::StatusCode::OK, "{v}");
    assert_eq!(common::txns(&v), ["new"]);
    assert!(
        b.state
            .hints
            .of(queen_log::conventions::DEFAULT_TENANT, &q)
            .len()
            <= 1,
        "the served one is no hint"
    );
}

/// Hints are the partitions pushed to lately, not those waiting longest: a queue pushed
/// to without pause must not keep its pops on them for ever. Partition `old` holds a
/// message pushed through SQL (so no hint names it); the broker's pushes keep three
/// other partitions hinted; one pop in eight goes without hints and serves the page's
/// order, least recently leased first: `old`, never leased.
#[tokio::test]
async fn a_partition_no_hint_names_is_served_while_hinted_ones_keep_getting_pushes() {
    let b = start().await;
    let q = unique("hint-fair");
    admin()
        .await
        .execute("SELECT queen.push($1, '[0]', ARRAY['old-0'], 'old')", &[&q])
        .await
        .unwrap();
    let mut served = Vec::new();
    for i in 0..queen_broker::engine::hints::FAIR_EVERY * 2 {
        let p = format!("h{}", i % 3);
        b.push(json!([{"queue": q, "partition": p, "transactionId": format!("{q}-{i}"), "payload": i}]))
            .await;
        let v = b
            .pop(&q, "batch=1&wait=false")
            .await
            .expect("something is ready");
        let m = &v["messages"][0];
        served.push(m["partition"].as_str().unwrap().to_string());
        let (s, a) = b
            .ack_batch(
                json!({"acknowledgments": [{"transactionId": m["transactionId"],
                "partitionId": m["partitionId"], "leaseId": v["leaseId"], "status": "completed"}]}),
            )
            .await;
        assert!(s.is_success(), "{a}");
    }
    let at = served.iter().position(|p| p == "old");
    assert_eq!(
        at,
        Some(queen_broker::engine::hints::FAIR_EVERY as usize - 1),
        "the first pop without hints serves the partition no hint names: {served:?}"
    );
}
