//! Queen's namespace and task lists (`GET /api/v1/resources/namespaces`, `/tasks`):
//! queues named `namespace.task` are counted under both, with their messages.

use crate::common;

use common::{start, unique};
use reqwest::StatusCode;
use serde_json::{json, Value};

fn entry<'a>(list: &'a Value, key: &str, name: &str) -> &'a Value {
    list[format!("{key}s")]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e[key] == name)
        .unwrap_or_else(|| panic!("{name} missing from {list}"))
}

#[tokio::test]
async fn namespaces_and_tasks_count_queues_partitions_and_messages() {
    let b = start().await;
    let ns = unique("ns").replace('-', "_");
    let (ta, tb) = (format!("{ns}_a"), format!("{ns}_b"));
    let (qa, qb) = (format!("{ns}.{ta}"), format!("{ns}.{tb}"));
    b.push(json!([
        {"queue": qa, "payload": 1}, {"queue": qa, "payload": 2},
        {"queue": qb, "partition": "p1", "payload": 3}, {"queue": qb, "partition": "p2", "payload": 4},
    ]))
    .await;
    b.pop(&qa, "batch=1").await.expect("one leased");

    let (s, v) = b.get("/api/v1/resources/namespaces").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        entry(&v, "namespace", &ns),
        &json!({"namespace": ns, "queues": 2, "partitions": 3, "messages": {"total": 4, "pending": 3}})
    );
    let (s, v) = b.get("/api/v1/resources/tasks").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        entry(&v, "task", &ta),
        &json!({"task": ta, "queues": 1, "partitions": 1, "messages": {"total": 2, "pending": 1}})
    );
    assert_eq!(entry(&v, "task", &tb)["partitions"], 2);
    let names: Vec<&str> = v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["task"].as_str().unwrap())
        .collect();
    assert!(
        names.windows(2).all(|w| w[0] < w[1]),
        "by name, each once: {names:?}"
    );
}
