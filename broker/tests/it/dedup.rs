//! The push dedup watermark cache (src/dedup.rs) never hides a duplicate: against its
//! own earlier pushes, against segments written by another writer (a gap), after a
//! queue is recreated, and with the cache off.

use crate::common;

use common::*;
use serde_json::{json, Value};

async fn push_txns(b: &Broker, queue: &str, txns: &[String]) -> Vec<Value> {
    let items: Vec<Value> = txns
        .iter()
        .map(|t| json!({"queue": queue, "transactionId": t, "payload": {"t": t}}))
        .collect();
    b.push(json!(items)).await
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

#[tokio::test]
async fn cached_pushes_still_detect_old_duplicates_with_original_ids() {
    let b = start().await;
    let q = unique("dedup");
    b.configure(&q, json!({})).await;
    let first = push_txns(&b, &q, &names("a", 50)).await;
    for round in 0..5 {
        push_txns(&b, &q, &names(&format!("r{round}"), 50)).await;
    }
    let again = push_txns(&b, &q, &["a-7".to_string(), "fresh".to_string()]).await;
    assert_eq!(again[0]["status"], "duplicate");
    assert_eq!(again[0]["message_id"], first[7]["message_id"]);
    assert_eq!(again[1]["status"], "queued");
}

#[tokio::test]
async fn segments_from_another_writer_are_probed_not_skipped() {
    let b = start().await;
    let q = unique("dedup-gap");
    b.configure(&q, json!({})).await;
    push_txns(&b, &q, &names("a", 3)).await; // caches the partition
                                             // Another writer appends a segment the broker never saw.
    push_raw(&admin().await, &q, "Default", "other-1", b"{}").await;
    // Unknown to the cache: the watermark stays below the gap, so SQL probes it.
    let r = push_txns(&b, &q, &["other-1".to_string()]).await;
    assert_eq!(r[0]["status"], "duplicate", "{r:?}");
    // Known to the cache at offset 1: the watermark drops below it.
    let r = push_txns(&b, &q, &["a-1".to_string()]).await;
    assert_eq!(r[0]["status"], "duplicate", "{r:?}");
    let r = push_txns(&b, &q, &["b-1".to_string()]).await;
    assert_eq!(r[0]["status"], "queued");
}

#[tokio::test]
async fn recreated_queue_starts_a_fresh_cache() {
    let b = start().await;
    let q = unique("dedup-recreate");
    b.configure(&q, json!({})).await;
    push_txns(&b, &q, &names("a", 5)).await;
    push_txns(&b, &q, &names("b", 5)).await;
    let db = admin().await;
    db.execute("DELETE FROM queen.queues WHERE name = $1", &[&q])
        .await
        .unwrap();
    b.configure(&q, json!({})).await;
    let r = push_txns(&b, &q, &names("a", 2)).await;
    assert_eq!(
        (r[0]["status"].as_str(), r[0]["offset"].as_i64()),
        (Some("queued"), Some(0))
    );
    let r = push_txns(&b, &q, &["a-1".to_string()]).await;
    assert_eq!(r[0]["status"], "duplicate");
}

#[tokio::test]
async fn cache_off_gives_the_same_verdicts() {
    let b = start_with(|c| c.dedup_cache_mb = 0).await;
    let q = unique("dedup-off");
    b.configure(&q, json!({})).await;
    push_txns(&b, &q, &names("a", 10)).await;
    let r = push_txns(&b, &q, &["a-3".to_string(), "z".to_string()]).await;
    assert_eq!(
        (r[0]["status"].as_str(), r[1]["status"].as_str()),
        (Some("duplicate"), Some("queued"))
    );
    assert_eq!(b.state.dedup.cached_hashes(), 0);
}

/// Issue 12 item 3: a cache loaded under a short window must not hide rows a longer
/// window brings back into the probe. With dedupWindowSeconds 2, broker E2 pushes X;
/// 3 s later broker E pushes Y (E loads its cache, X already outside the window); the
/// window is raised to 3600 (through E2, so E never sees the configure); X through E
/// must be the duplicate E2 would call it, with the original message id.
#[tokio::test]
async fn raising_the_window_through_another_broker_is_seen_by_the_cache() {
    let e = start().await;
    let e2 = start().await;
    let q = unique("dedup-window");
    e2.configure(&q, json!({"dedupWindowSeconds": 2})).await;
    let x = push_txns(&e2, &q, &["x".to_string()]).await;
    assert_eq!(x[0]["status"], "queued");
    tokio::time::sleep(std::time::Duration::from_millis(3100)).await;
    let y = push_txns(&e, &q, &["y".to_string()]).await;
    assert_eq!(y[0]["status"], "queued");
    assert!(e.state.dedup.cached_hashes() > 0, "E cached the partition");
    e2.configure(&q, json!({"dedupWindowSeconds": 3600})).await;
    let again = push_txns(&e, &q, &["x".to_string()]).await;
    assert_eq!(again[0]["status"], "duplicate", "{again:?}");
    assert_eq!(again[0]["message_id"], x[0]["message_id"]);
    // E2 (no cache of this partition) agrees.
    let via_e2 = push_txns(&e2, &q, &["x".to_string()]).await;
    assert_eq!(via_e2[0]["status"], "duplicate", "{via_e2:?}");
}

/// The same state reached by one broker: its cache was loaded under the short window,
/// then this broker itself raised it.
#[tokio::test]
async fn raising_the_window_through_the_same_broker_is_seen_by_the_cache() {
    let e = start().await;
    let q = unique("dedup-window1");
    e.configure(&q, json!({"dedupWindowSeconds": 2})).await;
    let x = push_txns(&e, &q, &["x".to_string()]).await;
    tokio::time::sleep(std::time::Duration::from_millis(3100)).await;
    // A fresh cache (as after a restart or an eviction) loads without X.
    e.state.dedup.forget_all();
    push_txns(&e, &q, &["y".to_string()]).await;
    e.configure(&q, json!({"dedupWindowSeconds": 3600})).await;
    let again = push_txns(&e, &q, &["x".to_string()]).await;
    assert_eq!(again[0]["status"], "duplicate", "{again:?}");
    assert_eq!(again[0]["message_id"], x[0]["message_id"]);
}

/// A broker remembers its push lookups for a while (engine/lookups.rs): a queue deleted
/// and pushed again by another writer meanwhile has a new partition id, and the
/// watermark this broker computed for the old one must not skip the new one's probe.
#[tokio::test]
async fn a_queue_recreated_by_another_writer_is_probed_whole() {
    let b = start().await;
    let q = unique("dedup-elsewhere");
    b.configure(&q, json!({})).await;
    push_txns(&b, &q, &names("a", 5)).await;
    push_txns(&b, &q, &names("b", 5)).await; // the lookup remembered, the window cached
    let db = admin().await;
    db.execute("DELETE FROM queen.queues WHERE name = $1", &[&q])
        .await
        .unwrap();
    push_raw(&db, &q, "Default", "z", b"{}").await;
    let r = push_txns(&b, &q, &["z".to_string()]).await;
    assert_eq!(r[0]["status"], "duplicate", "{r:?}");
    assert!(metric(&metrics(&b).await, "queen_push_lookup_cache_hits_total") >= 1.0);
    // And from then on the new partition is the one remembered and cached.
    let r = push_txns(&b, &q, &["y".to_string()]).await;
    assert_eq!(
        (r[0]["status"].as_str(), r[0]["offset"].as_i64()),
        (Some("queued"), Some(1))
    );
    let r = push_txns(&b, &q, &["y".to_string(), "z".to_string()]).await;
    assert_eq!(
        (r[0]["status"].as_str(), r[1]["status"].as_str()),
        (Some("duplicate"), Some("duplicate"))
    );
}
