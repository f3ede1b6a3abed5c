//! Queen 2.x's locks and semaphores over real HTTP (docs/decisions.md, "Locks"): one
//! holder at a time under contention, a call sent again by its owner is the same
//! permit, a token only rises, a guarded transaction commits while the permit is held
//! and commits nothing once it was taken over, a semaphore never grants more than its
//! limit. Expiry is forced in the database, not waited for.

use crate::common;

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

const TENANT: &str = "00000000-0000-0000-0000-000000000001";

/// locks::the_lock_namespace_cannot_be_written_through_kv: while A holds L, a kv put,
/// putIfAbsent, incr or delete of `queen-locks`/`L#0` is refused (400
/// `kv_namespace_reserved`; in a transaction's kv rider too; 22023 from SQL) and the
/// permit is still A's with its token. Reading and checking it stay allowed.
#[tokio::test]
async fn the_lock_namespace_cannot_be_written_through_kv() {
    let b = start().await;
    let name = unique("lock-kv");
    let key = format!("{name}#0");
    let a = one(&b, acquire(&name, "a", 1)).await;
    assert_eq!(a["acquired"], true, "{a}");
    let writes = [
        json!({"op": "put", "ns": "queen-locks", "key": key,
               "value": {"owner": "intruder"}, "ttlSeconds": 300}),
        json!({"op": "putIfAbsent", "ns": "queen-locks", "key": key, "value": 1, "forever": true}),
        json!({"op": "incr", "ns": "queen-locks", "key": key, "forever": true}),
        json!({"op": "delete", "ns": "queen-locks", "key": key}),
        json!({"op": "put", "ns": "queen-kv-high-water", "key": "queen-locks", "value": 1,
               "forever": true}),
    ];
    let db = admin().await;
    for w in &writes {
        let (s, v) = b.post("/api/v1/kv", &json!({"operations": [w]})).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{w}: {v}");
        assert_eq!(v["reason"], "kv_namespace_reserved", "{w}: {v}");
        let (s, v) = b
            .post("/api/v1/transaction", &json!({"operations": [], "kv": [w]}))
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{w}: {v}");
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .contains("kv_namespace_reserved"),
            "{w}: {v}"
        );
        let e = db
            .query_one(
                "SELECT queen.kv_apply_v1($1::jsonb, $2::uuid)",
                &[&json!([w]), &uuid::Uuid::parse_str(TENANT).unwrap()],
            )
            .await
            .unwrap_err();
        let code = e.as_db_error().map(|d| d.code().code().to_string());
        assert_eq!(code.as_deref(), Some("22023"), "{w}: {e:?}");
    }
    let held = one(&b, json!({"op": "get", "name": name})).await;
    assert_eq!(held["holders"][0]["owner"], "a", "{held}");
    assert_eq!(held["holders"][0]["token"], a["token"], "{held}");
    let (s, v) = b
        .post(
            "/api/v1/kv",
            &json!({"operations": [
                {"op": "get", "ns": "queen-locks", "key": key},
                {"op": "check", "ns": "queen-locks", "key": key, "expect": a["token"]}]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v["results"][1]["applied"], true,
        "reads and checks stay: {v}"
    );
}

/// Holds (tenant, ns, key)'s write lock in a transaction of `db` (the lock every writer
/// of the key takes first, src/kv.rs find_locked); the backend's pid.
async fn hold_key(tx: &tokio_postgres::Transaction<'_>, ns: &str, key: &str) -> i32 {
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1 || chr(31) || $2 || chr(31) || $3, 7))",
        &[&TENANT, &ns, &key],
    )
    .await
    .unwrap();
    tx.query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

/// Waits until a statement starting with `prefix` waits on a lock of backend `holder`.
async fn until_waiting(prefix: &str, holder: i32) {
    let watcher = admin().await;
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while common::waiters_of(&watcher, prefix, holder)
        .await
        .is_empty()
    {
        assert!(std::time::Instant::now() < until, "{prefix} never waited");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

async fn sql_locks(tx: &tokio_postgres::Transaction<'_>, ops: Value) -> Value {
    let v: Value = tx
        .query_one(
            "SELECT queen.locks_apply_v1($1::jsonb, $2::uuid)",
            &[&ops, &uuid::Uuid::parse_str(TENANT).unwrap()],
        )
        .await
        .unwrap()
        .get(0);
    v["results"][0].clone()
}

/// locks::a_token_after_a_release_is_higher_than_the_released_one: an acquire of L that
/// began (and waited on L's lock) before another holder took and released L gets a
/// token above that holder's. Driven deterministically: a session holds L's key lock,
/// the broker's acquire waits on it, the session takes and releases L and commits.
/// (Before: the waiting call had read the clock before the lock and used it as the
/// token of the absent row, lower than the released one.)
#[tokio::test]
async fn a_token_after_a_release_is_higher_than_the_released_one() {
    common::exclusive_on_citus().await;
    let b = start().await;
    let name = unique("lock-after");
    let mut h = admin().await;
    let tx = h.transaction().await.unwrap();
    let pid = hold_key(&tx, "queen-locks", &format!("{name}#0")).await;
    let waiting = {
        let (base, http, name) = (b.base.clone(), b.http.clone(), name.clone());
        tokio::spawn(async move {
            let r = http
                .post(format!("{base}/api/v1/locks"))
                .json(&json!({"operations": [acquire(&name, "late", 1)]}))
                .send()
                .await
                .unwrap();
            r.json::<Value>().await.unwrap()["results"][0].clone()
        })
    };
    until_waiting("SELECT queen.locks_apply_v1", pid).await;
    let first = sql_locks(&tx, json!([acquire(&name, "first", 1)])).await;
    assert_eq!(first["acquired"], true, "{first}");
    let released = sql_locks(
        &tx,
        json!([{"op": "release", "name": name, "token": first["token"], "slot": 0}]),
    )
    .await;
    assert_eq!(released["released"], true, "{released}");
    tx.commit().await.unwrap();
    let late = waiting.await.unwrap();
    assert_eq!(late["acquired"], true, "{late}");
    assert!(
        late["token"].as_i64().unwrap() > first["token"].as_i64().unwrap(),
        "a later holder, a higher token: {late} after {first}"
    );
}

/// locks::a_kv_version_after_a_delete_is_higher_than_the_deleted_one: the same
/// interleaving for a kv key: a put that waited through another session's put and
/// delete of the key writes a higher version.
#[tokio::test]
async fn a_kv_version_after_a_delete_is_higher_than_the_deleted_one() {
    common::exclusive_on_citus().await;
    let b = start().await;
    let ns = unique("kv-after");
    let mut h = admin().await;
    let tx = h.transaction().await.unwrap();
    let pid = hold_key(&tx, &ns, "k").await;
    let waiting = {
        let (base, http, ns) = (b.base.clone(), b.http.clone(), ns.clone());
        tokio::spawn(async move {
            let r = http
                .post(format!("{base}/api/v1/kv"))
                .json(&json!({"operations": [
                    {"op": "put", "ns": ns, "key": "k", "value": "late", "forever": true}]}))
                .send()
                .await
                .unwrap();
            r.json::<Value>().await.unwrap()["results"][0].clone()
        })
    };
    until_waiting("SELECT queen.kv_apply_v1", pid).await;
    let v: Value = tx
        .query_one(
            "SELECT queen.kv_apply_v1($1::jsonb, $2::uuid)",
            &[
                &json!([{"op": "put", "ns": ns, "key": "k", "value": "first", "forever": true},
                        {"op": "delete", "ns": ns, "key": "k"}]),
                &uuid::Uuid::parse_str(TENANT).unwrap(),
            ],
        )
        .await
        .unwrap()
        .get(0);
    let first = v["results"][0]["version"].as_i64().unwrap();
    assert_eq!(v["results"][1]["applied"], true, "{v}");
    tx.commit().await.unwrap();
    let late = waiting.await.unwrap();
    assert!(
        late["version"].as_i64().unwrap() > first,
        "a later write, a higher version: {late} after {first}"
    );
}

/// locks::a_token_stays_above_what_maintenance_removed: a permit whose token is ahead
/// of the clock (as a burst of renewals within one microsecond, or a clock stepped back,
/// would leave it) expires and maintenance removes its row; the next holder's token is
/// still higher (the namespace's high-water mark), and so is a kv key's next version.
/// From SQL, in a tenant of its own (the mark it leaves stays with that tenant).
#[tokio::test]
async fn a_token_stays_above_what_maintenance_removed() {
    let tenant = uuid::Uuid::new_v4();
    let db = admin().await;
    let call = |f: &'static str, ops: Value| {
        let db = &db;
        async move {
            let v: Value = db
                .query_one(
                    &format!("SELECT queen.{f}($1::jsonb, $2::uuid)"),
                    &[&ops, &tenant],
                )
                .await
                .unwrap()
                .get(0);
            v["results"][0].clone()
        }
    };
    let first = call("locks_apply_v1", json!([acquire("L", "a", 1)])).await;
    assert_eq!(first["acquired"], true, "{first}");
    let put = json!([{"op": "put", "ns": "n", "key": "k", "value": 1, "forever": true}]);
    call("kv_apply_v1", put.clone()).await;
    // Eleven days of microseconds ahead of the clock.
    // The version is computed first: Citus refuses a VOLATILE function in an UPDATE of
    // a distributed table.
    let ahead_of_clock: i64 = db
        .query_one(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint + 1e12::bigint",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let rows = db
        .query(
            "UPDATE queen.kv
                SET version = $2, expires_at = now() - interval '1 second'
              WHERE tenant_id = $1 AND ((ns = 'queen-locks' AND key = 'L#0') OR (ns = 'n' AND key = 'k'))
             RETURNING ns, version",
            &[&tenant, &ahead_of_clock],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    let ahead = |ns: &str| -> i64 {
        rows.iter()
            .find(|r| r.get::<_, &str>(0) == ns)
            .map(|r| r.get(1))
            .unwrap()
    };
    let step: Value = db
        .query_one("SELECT queen.kv_expire_step_v1(100000)", &[])
        .await
        .unwrap()
        .get(0);
    let left: i64 = db
        .query_one(
            "SELECT count(*) FROM queen.kv WHERE tenant_id = $1 AND ns IN ('queen-locks', 'n')",
            &[&tenant],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "maintenance removed both rows: {step}");
    let next = call("locks_apply_v1", json!([acquire("L", "b", 1)])).await;
    assert_eq!(next["acquired"], true, "{next}");
    let token_was = ahead("queen-locks");
    assert!(
        next["token"].as_i64().unwrap() > token_was,
        "{next} after {token_was}"
    );
    let v = call("kv_apply_v1", put).await;
    let version_was = ahead("n");
    assert!(
        v["version"].as_i64().unwrap() > version_was,
        "{v} after {version_was}"
    );
}
