//! Deleting a consumer group over HTTP (Queen's `DELETE /api/v1/consumer-groups/{group}`
//! and `.../queues/{queue}`, `deleteMetadata`): its cursors and leases go, other groups
//! stay, its next pop starts it as new, and a bad parameter changes nothing.

use crate::common;

use common::{acks_for, admin, start, unique, Broker};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Two messages in each of partitions p1 and p2 of `q`.
async fn two_partitions(b: &Broker, q: &str) {
    let items: Vec<Value> = (0..4)
        .map(|i| json!({"queue": q, "partition": format!("p{}", 1 + i % 2), "payload": i, "transactionId": format!("{q}-{i}")}))
        .collect();
    b.push(json!(items)).await;
}

/// Every message the group can pop now (auto-acked), one pop per partition.
async fn drain(b: &Broker, q: &str, group: &str) -> usize {
    let mut n = 0;
    while let Some(p) = b
        .pop(
            q,
            &format!("consumerGroup={group}&batch=100&autoAck=true&subscriptionMode=all"),
        )
        .await
    {
        n += p["messages"].as_array().unwrap().len();
    }
    n
}

/// The group's cursors on the queue, and its subscription records.
async fn rows_of(q: &str, group: &str) -> (i64, i64) {
    let db = admin().await;
    let count = |sql: &'static str| {
        let db = &db;
        async move {
            db.query_one(sql, &[&q, &group])
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    (
        count(
            "SELECT count(*) FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id
               JOIN queen.queues qu ON qu.id = p.queue_id WHERE qu.name = $1 AND c.consumer_group = $2",
        )
        .await,
        count(
            "SELECT count(*) FROM queen.consumer_groups_metadata m JOIN queen.queues qu ON qu.id = m.queue_id
              WHERE qu.name = $1 AND m.consumer_group = $2",
        )
        .await,
    )
}

#[tokio::test]
async fn deleting_a_group_for_a_queue_voids_its_lease_keeps_other_groups_and_replays_it_as_new() {
    let b = start().await;
    let q = unique("cgdel");
    two_partitions(&b, &q).await;
    assert_eq!(drain(&b, &q, "g").await, 4);
    assert_eq!(drain(&b, &q, "h").await, 4);
    b.push(json!([{"queue": q, "partition": "p1", "payload": "late", "transactionId": format!("{q}-late")}]))
        .await;
    let leased = b
        .pop(&q, "consumerGroup=g&batch=10")
        .await
        .expect("the late message");

    let (s, v) = b
        .delete(&format!("/api/v1/consumer-groups/g/queues/{q}"))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v,
        json!({"success": true, "consumerGroup": "g", "deletedPartitions": 2, "metadataDeleted": true})
    );
    assert_eq!(rows_of(&q, "g").await, (0, 0));
    assert_eq!(rows_of(&q, "h").await, (2, 1), "another group is untouched");

    let (_, v) = b.ack_batch(acks_for(&leased, "completed", None)).await;
    assert_eq!(v[0]["success"], false, "{v}");
    assert_eq!(
        v[0]["error"], "consumer not found",
        "the cursor is gone, and its lease with it"
    );
    // Popped again, the group starts as new: subscriptionMode=all replays all five.
    assert_eq!(drain(&b, &q, "g").await, 5);
    assert_eq!(drain(&b, &q, "h").await, 1);
}

#[tokio::test]
async fn deleting_a_group_everywhere_covers_every_queue_and_delete_metadata_false_keeps_its_records(
) {
    let b = start().await;
    let g = unique("cgall");
    let (q1, q2) = (unique("cgall-a"), unique("cgall-b"));
    for q in [&q1, &q2] {
        b.push(json!([{"queue": q, "payload": 1}])).await;
        assert_eq!(drain(&b, q, &g).await, 1);
    }
    let (s, v) = b
        .delete(&format!("/api/v1/consumer-groups/{g}?deleteMetadata=false"))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["deletedPartitions"], 2, "{v}");
    assert_eq!(v["metadataDeleted"], false, "{v}");
    assert_eq!(rows_of(&q1, &g).await, (0, 1));
    assert_eq!(rows_of(&q2, &g).await, (0, 1));
    let (s, v) = b.delete(&format!("/api/v1/consumer-groups/{g}")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["deletedPartitions"], 0, "{v}");
    assert_eq!(v["metadataDeleted"], true, "{v}");
    assert_eq!(rows_of(&q1, &g).await, (0, 0));
    // An unknown group or queue deletes nothing and says so.
    let (s, v) = b
        .delete(&format!(
            "/api/v1/consumer-groups/{g}/queues/{}",
            unique("nope")
        ))
        .await;
    assert_eq!(
        (s, v["deletedPartitions"].clone()),
        (StatusCode::OK, json!(0))
    );
}

#[tokio::test]
async fn a_bad_delete_metadata_is_a_400_naming_it_and_deletes_nothing() {
    let b = start().await;
    let q = unique("cgbad");
    two_partitions(&b, &q).await;
    assert_eq!(drain(&b, &q, "g").await, 4);
    let (s, v) = b
        .delete(&format!(
            "/api/v1/consumer-groups/g/queues/{q}?deleteMetadata=maybe"
        ))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("deleteMetadata"),
        "{v}"
    );
    let long = "x".repeat(256);
    let (s, v) = b.delete(&format!("/api/v1/consumer-groups/{long}")).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(rows_of(&q, "g").await, (2, 1));
}

/// consumer_groups::a_delete_that_loses_a_deadlock_is_run_again: the delete locks the
/// group's lease rows partition by partition (ascending id). A session holds the higher
/// partition's row; once the delete waits on it, the session asks for the lower one: a
/// deadlock, whose victim is the delete (it waited first, so its check runs first). The
/// delete rolled back whole, so the broker runs it again, and it answers 200 once the
/// session lets go (before the fix: 503 "database retry later (40P01)").
#[tokio::test]
async fn a_delete_that_loses_a_deadlock_is_run_again() {
    common::exclusive_on_citus().await;
    let b = start().await;
    let q = unique("cgdeadlock");
    two_partitions(&b, &q).await;
    for _ in 0..2 {
        b.pop(&q, "consumerGroup=g&batch=10&subscriptionMode=all")
            .await
            .expect("a leased batch");
    }
    let mut db = admin().await;
    let pids: Vec<uuid::Uuid> = db
        .query(
            "SELECT p.id FROM queen.log_partitions p JOIN queen.queues qu ON qu.id = p.queue_id
              WHERE qu.name = $1 ORDER BY p.id",
            &[&q],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(pids.len(), 2);
    let holder: i32 = db
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let tx = db.transaction().await.unwrap();
    let lock = "SELECT 1 FROM queen.log_leases WHERE partition_id = $1 AND consumer_group = 'g' FOR UPDATE";
    tx.execute(lock, &[&pids[1]]).await.unwrap();
    let (base, http) = (b.base.clone(), b.http.clone());
    let path = format!("{base}/api/v1/consumer-groups/g/queues/{q}");
    let delete = tokio::spawn(async move { http.delete(path).send().await.unwrap() });
    let watcher = admin().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while common::waiters_of(&watcher, "SELECT queen.delete_consumer_group_v1", holder)
        .await
        .is_empty()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the delete never waited"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // The cycle: this waits on the delete's lower row until the delete is the victim.
    tx.execute(lock, &[&pids[0]]).await.unwrap();
    tx.rollback().await.unwrap();
    let r = delete.await.unwrap();
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["deletedPartitions"], 2, "{v}");
    assert_eq!(rows_of(&q, "g").await, (0, 0));
}
