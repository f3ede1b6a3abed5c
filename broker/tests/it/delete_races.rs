//! DELETE of a queue racing the calls that create rows under it:
//! first pops of new consumer groups, pushes into new partitions, DLQ filings. Before
//! the fix, 150 rounds gave 9 pops and 2 pushes a 500 (23503 foreign key violations) and
//! 200 rounds of filing against DELETE left 19 DLQ rows of partitions that no longer
//! existed. Every round fires the racing requests at once over real HTTP.

use crate::common;

use common::{acks_for, admin, start, unique};
use reqwest::StatusCode;
use serde_json::json;

const ROUNDS: usize = 150;

#[tokio::test]
async fn delete_racing_first_pops_and_pushes_answers_no_5xx_but_retryable_503() {
    let b = start().await;
    let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
    for round in 0..ROUNDS {
        let q = unique("race");
        b.push(json!([{"queue": q, "payload": 1, "transactionId": "seed"}]))
            .await;
        let (delete_path, pop_path) = (
            format!("/api/v1/resources/queues/{q}"),
            format!("/api/v1/pop/queue/{q}?consumerGroup=g{round}"),
        );
        let item = json!({"items": [{"queue": q, "partition": format!("p{round}"), "payload": 2,
                                     "transactionId": format!("t{round}")}]});
        let ((ds, dv), (ps, pv), (us, uv)) = tokio::join!(
            b.delete(&delete_path),
            b.get(&pop_path),
            b.post("/api/v1/push", &item)
        );
        assert_eq!(ds, StatusCode::OK, "delete: {dv}");
        // The pop either ran first (a message, or nothing yet) or after (nothing).
        assert!(
            matches!(ps, StatusCode::OK | StatusCode::NO_CONTENT),
            "pop {ps}: {pv}"
        );
        // The push either recreated the queue or was told to retry; never a 500.
        assert!(
            us == StatusCode::CREATED || us == StatusCode::SERVICE_UNAVAILABLE,
            "push {us}: {uv}"
        );
        if us == StatusCode::CREATED {
            assert_eq!(uv[0]["status"], "queued", "{uv}");
        }
        *seen.entry(format!("pop {ps} push {us}")).or_default() += 1;
    }
    eprintln!("outcomes over {ROUNDS} rounds: {seen:?}");
}

#[tokio::test]
async fn dlq_filing_racing_delete_leaves_no_row_of_a_deleted_partition() {
    let b = start().await;
    let db = admin().await;
    let mut filed = 0;
    let mut pids: Vec<uuid::Uuid> = Vec::new();
    for round in 0..ROUNDS {
        let q = unique("dlq-race");
        b.configure(&q, json!({"retryLimit": 0, "deadLetterQueue": true}))
            .await;
        b.push(json!([{"queue": q, "payload": round, "transactionId": "poison"}]))
            .await;
        let pop = b.pop(&q, "consumerGroup=g").await.expect("the message");
        pids.push(pop["partitionId"].as_str().unwrap().parse().unwrap());
        let body = json!({"consumerGroup": "g",
            "acknowledgments": acks_for(&pop, "failed", Some("boom"))["acknowledgments"]});
        let delete_path = format!("/api/v1/resources/queues/{q}");
        let (ack, delete) = tokio::join!(b.ack_batch(body), b.delete(&delete_path));
        assert_eq!(delete.0, StatusCode::OK, "{}", delete.1);
        assert!(
            matches!(ack.0, StatusCode::OK | StatusCode::SERVICE_UNAVAILABLE),
            "ack {}: {}",
            ack.0,
            ack.1
        );
        filed += usize::from(ack.1[0]["dlq"] == true);
    }
    // Rows of this test's deleted partitions only: other suites sharing the database
    // leave orphans on purpose (a plain DELETE FROM queen.queues, for orphan cleanup).
    let orphans: i64 = db
        .query_one(
            "SELECT (SELECT count(*) FROM queen.log_dlq WHERE partition_id = ANY($1))
                  + (SELECT count(*) FROM queen.log_txns WHERE partition_id = ANY($1))",
            &[&pids],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        orphans, 0,
        "rows of deleted partitions ({filed} of {ROUNDS} filings won)"
    );
}
