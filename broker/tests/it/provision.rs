//! First pushes racing to create one queue's partitions all succeed (the extension
//! provisions in two statements so the second sees the queue the first one waited for).

use crate::common;

use common::*;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_first_pushes_to_new_partitions_all_queue() {
    let b = start().await;
    for round in 0..5 {
        let q = unique(&format!("provision{round}"));
        let mut tasks = tokio::task::JoinSet::new();
        for p in 0..8 {
            let (http, url) = (b.http.clone(), format!("{}/api/v1/push", b.base));
            let body =
                json!({"items": [{"queue": q, "partition": format!("p{p}"), "payload": {"p": p}}]});
            tasks.spawn(async move {
                let r = http.post(url).json(&body).send().await.expect("request");
                (r.status(), r.json::<Value>().await.expect("json"))
            });
        }
        while let Some(res) = tasks.join_next().await {
            let (status, body) = res.expect("task");
            assert_eq!(status, 201, "{body}");
            assert_eq!(body[0]["status"], "queued", "{body}");
        }
    }
}

/// A one-frame segment with this transactionId, as a bytea literal.
fn segment_literal(txn: &str) -> String {
    let blob = common::one_frame_blob(txn, b"{}");
    let hex: String = blob.iter().map(|b| format!("{b:02x}")).collect();
    format!("'\\x{hex}'::bytea")
}

/// `log_push_multi_v1` over `partitions` of `queue` (one frame each).
fn multi_push_sql(queue: &str, partitions: &[&str]) -> String {
    let arr = |f: &dyn Fn(usize, &str) -> String| {
        partitions
            .iter()
            .enumerate()
            .map(|(i, p)| f(i, p))
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        "SELECT queen.log_push_multi_v1(ARRAY[{}], ARRAY[{}], ARRAY[{}], ARRAY[{}], ARRAY[{}]::bigint[], ARRAY[{}])",
        arr(&|_, _| format!("'{queue}'")),
        arr(&|_, p| format!("'{p}'")),
        arr(&|_, _| "1".into()),
        arr(&|i, p| format!("queen.xxh3_128('{p}-{i}')")),
        arr(&|_, _| "-1".into()),
        arr(&|i, p| segment_literal(&format!("{p}-{i}"))),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_pushes_provision_new_partitions_in_one_order() {
    common::exclusive_on_citus().await;
    let q = unique("provorder");
    let setup = admin().await;
    // The queue exists; partitions a and b do not.
    setup
        .batch_execute(&multi_push_sql(&q, &["seed"]))
        .await
        .unwrap();
    let t1 = admin().await;
    let t2 = admin().await;
    let holder: i32 = t1
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    t1.batch_execute("BEGIN").await.unwrap();
    t1.batch_execute(&multi_push_sql(&q, &["a"])).await.unwrap();
    // T2 wants b and a: creating them in input order it would hold b while waiting for
    // T1's a, and T1's next push of b would close the cycle (40P01).
    let sql2 = multi_push_sql(&q, &["b", "a"]);
    let h2 = tokio::spawn(async move {
        t2.batch_execute("BEGIN").await?;
        t2.batch_execute(&sql2).await?;
        t2.batch_execute("COMMIT").await
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if !waiters_of(&setup, "SELECT queen.log_push_multi_v1", holder)
            .await
            .is_empty()
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "T2 never blocked on T1"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let r1 = t1.batch_execute(&multi_push_sql(&q, &["b"])).await;
    assert!(r1.is_ok(), "T1: {r1:?}");
    t1.batch_execute("COMMIT").await.unwrap();
    let r2 = h2.await.unwrap();
    assert!(r2.is_ok(), "T2: {r2:?}");
}
