//! First pushes racing to create one queue's partitions all succeed (the extension
//! provisions in two statements so the second sees the queue the first one waited for).

mod common;

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
