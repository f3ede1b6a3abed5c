//! Queen 2.x's locks and semaphores over real HTTP (docs/decisions.md, "Locks"): one
//! holder at a time under contention, a call sent again by its owner is the same
//! permit, a token only rises, a guarded transaction commits while the permit is held
//! and commits nothing once it was taken over, a semaphore never grants more than its
//! limit. Expiry is forced in the database, not waited for.

mod common;

use common::{admin, start, unique, Broker};
use reqwest::StatusCode;
use serde_json::{json, Value};

async fn locks(b: &Broker, ops: Value) -> Vec<Value> {
    let (s, v) = b.post("/api/v1/locks", &json!({ "operations": ops })).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v["results"].as_array().unwrap().clone()
}

async fn one(b: &Broker, op: Value) -> Value {
    locks(b, json!([op])).await.remove(0)
}

fn acquire(name: &str, owner: &str, limit: i64) -> Value {
    json!({"op": "acquire", "name": name, "ttlSeconds": 30, "owner": owner, "limit": limit})
}

/// The permit's lease ends now (as if its holder had been paused past it).
async fn expire(name: &str, slot: i64) {
    admin()
        .await
        .execute(
            "UPDATE queen.kv SET expires_at = now() - interval '1 second'
              WHERE ns = 'queen-locks' AND key = $1",
            &[&format!("{name}#{slot}")],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn one_holder_under_contention_and_the_same_owner_is_the_same_permit() {
    let b = start().await;
    let name = unique("lock-one");
    let calls = (0..8).map(|i| {
        let (b, name) = (&b, name.clone());
        async move { one(b, acquire(&name, &format!("o{i}"), 1)).await }
    });
    let got = futures_util::future::join_all(calls).await;
    let winners: Vec<&Value> = got.iter().filter(|r| r["acquired"] == true).collect();
    assert_eq!(winners.len(), 1, "{got:?}");
    let w = winners[0];
    for l in got.iter().filter(|r| r["acquired"] == false) {
        assert_eq!(l["holders"][0]["owner"], w["owner"], "{l}");
        assert!(
            ["held", "contended"].contains(&l["reason"].as_str().unwrap()),
            "{l}"
        );
    }
    let owner = w["owner"].as_str().unwrap();
    let again = one(&b, acquire(&name, owner, 1)).await;
    assert_eq!(
        (again["already"].clone(), again["token"].clone()),
        (json!(true), w["token"].clone())
    );
    let who = one(&b, json!({"op": "get", "name": name})).await;
    assert_eq!(
        (who["held"].clone(), who["holders"][0]["token"].clone()),
        (json!(true), w["token"].clone())
    );
    // The permit is a kv row and nothing else: its version is the token.
    let (_, row) = b
        .post("/api/v1/kv", &json!({"operations": [{"op": "get", "ns": "queen-locks", "key": format!("{name}#0")}]}))
        .await;
    assert_eq!(row["results"][0]["version"], w["token"]);
    assert_eq!(row["results"][0]["value"]["owner"], w["owner"]);

    // Renewed, then the renew sent again with the old token by its owner: a new token
    // each time; a stranger with the old token has lost.
    let t0 = w["token"].as_i64().unwrap();
    let renew = |token: i64, who: &str| json!({"op": "renew", "name": name, "token": token, "ttlSeconds": 30, "owner": who});
    let r1 = one(&b, renew(t0, owner)).await;
    let r2 = one(&b, renew(t0, owner)).await;
    assert!(r1["renewed"] == true && r2["renewed"] == true, "{r1} {r2}");
    assert!(r2["token"].as_i64() > r1["token"].as_i64() && r1["token"].as_i64() > Some(t0));
    let stranger = one(&b, renew(t0, "someone-else")).await;
    assert_eq!(
        (stranger["renewed"].clone(), stranger["reason"].clone()),
        (json!(false), json!("lost"))
    );
    let stale = one(&b, json!({"op": "release", "name": name, "token": t0})).await;
    assert_eq!(stale["released"], false);
    let done = one(
        &b,
        json!({"op": "release", "name": name, "token": r2["token"]}),
    )
    .await;
    assert_eq!(done["released"], true);
    let next = one(&b, acquire(&name, "o-next", 1)).await;
    assert!(
        next["token"].as_i64() > r2["token"].as_i64(),
        "a later holder, a higher token"
    );
}

#[tokio::test]
async fn a_taken_over_lock_guards_nothing_for_its_old_holder() {
    let b = start().await;
    let (name, q) = (unique("lock-guard"), unique("lock-guard-q"));
    let old = one(&b, acquire(&name, "old", 1)).await;
    let step = |guard: &Value, n: &str| {
        json!({"operations": [{"type": "push", "items": [{"queue": q, "payload": {"from": n}}]}],
               "kv": [guard]})
    };
    let (_, v) = b
        .post("/api/v1/transaction", &step(&old["guard"], "old-1"))
        .await;
    assert_eq!(v["success"], true, "a guarded step commits while held: {v}");
    expire(&name, 0).await;
    let new = one(&b, acquire(&name, "new", 1)).await;
    assert_eq!(new["acquired"], true, "an expired lock is free: {new}");
    assert!(new["token"].as_i64() > old["token"].as_i64());
    let (_, v) = b
        .post("/api/v1/transaction", &step(&old["guard"], "old-2"))
        .await;
    assert_eq!(
        (
            v["success"].clone(),
            v["reason"].clone(),
            v["kvReason"].clone()
        ),
        (json!(false), json!("kv_precondition"), json!("version")),
        "{v}"
    );
    assert_eq!(v["value"]["owner"], "new", "the loser sees who holds it");
    let (_, v) = b
        .post("/api/v1/transaction", &step(&new["guard"], "new"))
        .await;
    assert_eq!(v["success"], true, "{v}");
    let got = b.pop(&q, "batch=10").await.unwrap();
    let from: Vec<&Value> = got["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["data"]["from"])
        .collect();
    assert_eq!(
        from,
        [&json!("old-1"), &json!("new")],
        "the old holder's late step pushed nothing"
    );
}

#[tokio::test]
async fn a_semaphore_never_grants_more_than_its_limit() {
    let b = start().await;
    let name = unique("sem");
    let calls = (0..12).map(|i| {
        let (b, name) = (&b, name.clone());
        async move { one(b, acquire(&name, &format!("s{i}"), 3)).await }
    });
    let got = futures_util::future::join_all(calls).await;
    let mut held: Vec<&Value> = got.iter().filter(|r| r["acquired"] == true).collect();
    assert!(!held.is_empty() && held.len() <= 3, "{got:?}");
    let mut extra = Vec::new();
    for i in 0..12 {
        if held.len() + extra.len() == 3 {
            break;
        }
        let r = one(&b, acquire(&name, &format!("late{i}"), 3)).await;
        if r["acquired"] == true {
            extra.push(r);
        }
    }
    held.extend(extra.iter());
    let mut slots: Vec<i64> = held.iter().map(|r| r["slot"].as_i64().unwrap()).collect();
    slots.sort();
    assert_eq!(slots, [0, 1, 2], "one holder per slot");
    let past = one(&b, acquire(&name, "past", 3)).await;
    assert_eq!(
        (past["acquired"].clone(), past["reason"].clone()),
        (json!(false), json!("held"))
    );
    let who = one(&b, json!({"op": "get", "name": name})).await;
    assert_eq!(who["holders"].as_array().unwrap().len(), 3);
    let freed = held[0]["slot"].as_i64().unwrap();
    one(
        &b,
        json!({"op": "release", "name": name, "token": held[0]["token"], "slot": freed}),
    )
    .await;
    let waiter = one(&b, acquire(&name, "past", 3)).await;
    assert_eq!(
        (waiter["acquired"].clone(), waiter["slot"].clone()),
        (json!(true), json!(freed))
    );
}

#[tokio::test]
async fn a_bad_op_is_refused_and_writes_nothing() {
    let b = start().await;
    let name = unique("lock-bad");
    for (op, reason, field) in [
        (
            json!({"op": "acquire", "name": "a#b", "ttlSeconds": 5}),
            "lock_name_invalid",
            "operations[0]",
        ),
        (
            json!({"op": "acquire", "name": name}),
            "lock_ttl_invalid",
            "operations[0]",
        ),
        (
            json!({"op": "acquire", "name": name, "ttlSeconds": 5, "forever": true}),
            "lock_op_invalid",
            "operations[0].forever",
        ),
        (
            json!({"op": "release", "name": name}),
            "lock_token_invalid",
            "operations[0]",
        ),
    ] {
        let (s, v) = b
            .post(
                "/api/v1/locks",
                &json!({"operations": [acquire(&name, "ok", 1), op]}),
            )
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
        let field = field.replace("[0]", "[1]");
        assert_eq!(
            (v["error"].clone(), v["reason"].clone(), v["field"].clone()),
            (json!("locks_bad_request"), json!(reason), json!(field)),
            "{v}"
        );
    }
    let who = one(&b, json!({"op": "get", "name": name})).await;
    assert_eq!(who["held"], false, "a refused call acquired nothing");
}
