//! The operator console at /console over real HTTP (docs/console.md): every view answers
//! HTML with the data it shows, each action changes what it says in the database and
//! redirects back, a form from another origin changes nothing, and with tokens on the
//! console signs in with a token and shows that token's tenant only. The browser test
//! (tests/browser/console.py) drives the same pages in Chromium.

use crate::common;

use common::{acks_for, admin, start, start_with, unique, Broker};
use queen_broker::http::auth::sign;
use reqwest::{redirect, StatusCode};
use serde_json::{json, Value};
use uuid::Uuid;

const SECRET: &str = "console-test-secret-of-some-length";

/// The database to this test alone (a maintenance mode is database-wide), with both
/// modes off (a failed run of the maintenance test must not leave pops answering empty
/// for the next).
async fn serial() {
    common::exclusive().await;
    admin()
        .await
        .batch_execute(
            "SELECT queen.system_state_set_v1('pop', false), queen.system_state_set_v1('push', false)",
        )
        .await
        .unwrap();
}

/// A client that does not follow redirects, with `cookie` if given.
fn client(cookie: Option<&str>) -> reqwest::Client {
    let mut h = reqwest::header::HeaderMap::new();
    if let Some(c) = cookie {
        h.insert(reqwest::header::COOKIE, c.parse().unwrap());
    }
    reqwest::Client::builder()
        .redirect(redirect::Policy::none())
        .default_headers(h)
        .build()
        .unwrap()
}

async fn html(c: &reqwest::Client, b: &Broker, path: &str) -> (StatusCode, String) {
    let r = c.get(format!("{}{path}", b.base)).send().await.unwrap();
    let s = r.status();
    if s == StatusCode::OK {
        let ct = r.headers()["content-type"].to_str().unwrap().to_string();
        assert!(ct.starts_with("text/html"), "{path}: {ct}");
    }
    (s, r.text().await.unwrap())
}

async fn form(
    c: &reqwest::Client,
    b: &Broker,
    path: &str,
    fields: &[(&str, &str)],
) -> reqwest::Response {
    c.post(format!("{}{path}", b.base))
        .form(fields)
        .send()
        .await
        .unwrap()
}

/// A queue with 3 messages, a group `g`, and one message dead-lettered by `g`.
async fn fixture(b: &Broker) -> (String, String) {
    let q = unique("con");
    b.configure(&q, json!({"leaseTime": 60, "retryLimit": 0}))
        .await;
    let items: Vec<Value> = (0..3)
        .map(|i| json!({"queue": q, "transactionId": format!("c{i}"), "payload": {"n": i, "note": "<payload>"}}))
        .collect();
    b.push(json!(items)).await;
    let pop = b.pop(&q, "consumerGroup=g&batch=1").await.expect("pop");
    let mut nack = acks_for(&pop, "failed", Some("boom: bad <input>"));
    nack["consumerGroup"] = json!("g");
    let (_, v) = b.ack_batch(nack).await;
    assert_eq!(v[0]["dlq"], true, "{v}");
    let (_, l) = b.get(&format!("/api/v1/dlq?queue={q}")).await;
    let id = l["messages"][0]["dlqId"].as_str().unwrap().to_string();
    (q, id)
}

#[tokio::test]
async fn every_view_shows_its_data() {
    serial().await;
    let b = start().await;
    let (q, id) = fixture(&b).await;
    let c = client(None);
    let r = c.get(format!("{}/console", b.base)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let (s, page) = html(&c, &b, "/console/queues").await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        page.contains(&q) && page.contains("<svg"),
        "the queue and its sparkline"
    );
    let (s, page) = html(&c, &b, &format!("/console/queues/{q}")).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        page.contains("Options in force") && page.contains("retryLimit"),
        "{page}"
    );
    assert!(
        page.contains("Default") && page.contains(">g<"),
        "partition and group"
    );
    let (s, page) = html(&c, &b, "/console/groups").await;
    assert_eq!(s, StatusCode::OK);
    assert!(page.contains(&q));
    let (s, page) = html(&c, &b, &format!("/console/dlq?queue={q}")).await;
    assert_eq!(s, StatusCode::OK);
    assert!(page.contains(&id), "the row's id in its forms");
    assert!(
        page.contains("boom: bad &lt;input&gt;"),
        "the error, escaped"
    );
    assert!(page.contains("&lt;payload&gt;"), "the payload, escaped");
    for path in [
        "/console/throughput",
        "/console/throughput?range=24h",
        "/console/lifecycle",
        "/console/maintenance",
    ] {
        let (s, page) = html(&c, &b, path).await;
        assert_eq!(s, StatusCode::OK, "{path}");
        assert!(page.contains("queen console"), "{path}");
    }
    let (s, _) = html(&c, &b, &format!("/console/queues/{}", unique("nobody"))).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    for a in ["/console/assets/console.css", "/console/assets/console.js"] {
        let r = c.get(format!("{}{a}", b.base)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{a}");
    }
}

#[tokio::test]
async fn redrive_and_delete_change_the_dead_letters() {
    serial().await;
    let b = start().await;
    let c = client(None);
    let (q, id) = fixture(&b).await;
    let r = form(
        &c,
        &b,
        "/console/dlq/redrive",
        &[("id", &id), ("queue", &q)],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let to = r.headers()["location"].to_str().unwrap().to_string();
    assert!(
        to.starts_with("/console/dlq?notice=") && to.contains(&q),
        "{to}"
    );
    let (_, l) = b.get(&format!("/api/v1/dlq?queue={q}")).await;
    assert_eq!(l["pagination"]["total"], 0, "redriven: {l}");
    let (_, page) = html(&c, &b, &to).await;
    assert!(
        page.contains("redrive of") && page.contains("moved"),
        "the notice says so"
    );

    // A second dead letter, deleted.
    let pop = b.pop(&q, "consumerGroup=g&batch=1").await.expect("pop");
    let mut nack = acks_for(&pop, "failed", Some("again"));
    nack["consumerGroup"] = json!("g");
    b.ack_batch(nack).await;
    let (_, l) = b.get(&format!("/api/v1/dlq?queue={q}")).await;
    let id2 = l["messages"][0]["dlqId"].as_str().unwrap().to_string();
    let r = form(&c, &b, "/console/dlq/delete", &[("id", &id2)]).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let db = admin().await;
    let n: i64 = db
        .query_one(
            "SELECT count(*) FROM queen.log_dlq WHERE id = $1",
            &[&Uuid::parse_str(&id2).unwrap()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "the row is gone");
    let r = form(&c, &b, "/console/dlq/delete", &[("id", "not-a-uuid")]).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_group_is_deleted_and_maintenance_switched() {
    serial().await;
    let b = start().await;
    let c = client(None);
    let (q, _) = fixture(&b).await;
    let r = form(
        &c,
        &b,
        "/console/groups/delete",
        &[("group", "g"), ("queue", &q)],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let db = admin().await;
    let n: i64 = db
        .query_one(
            "SELECT count(*) FROM queen.consumer_lag WHERE queue = $1 AND consumer_group = 'g'",
            &[&q],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "the group's cursors are gone");

    let r = form(
        &c,
        &b,
        "/console/maintenance",
        &[("mode", "pop"), ("enabled", "true")],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let to = r.headers()["location"].to_str().unwrap().to_string();
    let modes: Value = db
        .query_one("SELECT queen.system_state_v1()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(modes["popMaintenanceMode"], true);
    let (_, page) = html(&c, &b, &to).await;
    assert!(page.contains("pop maintenance on"), "the notice: {page}");
    let r = form(
        &c,
        &b,
        "/console/maintenance",
        &[("mode", "pop"), ("enabled", "false")],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let r = form(
        &c,
        &b,
        "/console/maintenance",
        &[("mode", "all"), ("enabled", "true")],
    )
    .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let modes: Value = db
        .query_one("SELECT queen.system_state_v1()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(modes["popMaintenanceMode"], false);
}

#[tokio::test]
async fn a_form_from_another_origin_changes_nothing() {
    serial().await;
    let b = start().await;
    let (q, id) = fixture(&b).await;
    let r = client(None)
        .post(format!("{}/console/dlq/delete", b.base))
        .header("origin", "https://evil.example")
        .form(&[("id", id.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let (_, l) = b.get(&format!("/api/v1/dlq?queue={q}")).await;
    assert_eq!(l["pagination"]["total"], 1, "still there");
    // The broker's own origin is accepted.
    let own = b.base.trim_start_matches("http://").to_string();
    let r = client(None)
        .post(format!("{}/console/dlq/delete", b.base))
        .header("origin", format!("http://{own}"))
        .form(&[("id", id.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
}

fn token(tenant: Uuid, role: &str) -> String {
    sign(
        SECRET.as_bytes(),
        &json!({"tenant": tenant, "sub": "console", "role": role}),
    )
}

#[tokio::test]
async fn with_tokens_the_console_signs_in_and_shows_one_tenant() {
    serial().await;
    let b = start_with(|c| c.auth = Some(queen_broker::config::AuthConfig::hs256(SECRET))).await;
    let (ta, tb) = (Uuid::new_v4(), Uuid::new_v4());
    let a = b.with_token(&token(ta, "admin"));
    let other = b.with_token(&token(tb, "admin"));
    let (qa, id_a) = fixture(&a).await;
    let qb = unique("conb");
    other.configure(&qb, json!({})).await;

    let anon = client(None);
    let r = anon
        .get(format!("{}/console/queues", b.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/console/login");
    let (s, page) = html(&anon, &b, "/console/login").await;
    assert_eq!(s, StatusCode::OK);
    assert!(page.contains("name=\"token\""));
    let r = form(&anon, &b, "/console/login", &[("token", "not-a-token")]).await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = form(
        &anon,
        &b,
        "/console/login",
        &[("token", &token(ta, "read-only"))],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let set = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        set.contains("HttpOnly")
            && set.contains("SameSite=Strict")
            && set.contains("Path=/console"),
        "{set}"
    );
    let cookie = set.split(';').next().unwrap().to_string();

    let reader = client(Some(&cookie));
    let (s, page) = html(&reader, &b, "/console/queues").await;
    assert_eq!(s, StatusCode::OK);
    assert!(page.contains(&qa) && !page.contains(&qb), "A's queues only");
    assert!(page.contains(&ta.to_string()), "the tenant is shown");
    let (s, page) = html(&reader, &b, "/console/groups").await;
    assert_eq!(s, StatusCode::OK);
    assert!(!page.contains(&qb));
    let (s, _) = html(&reader, &b, &format!("/console/queues/{qb}")).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "B's queue does not exist for A");
    // A read-only token may look, not act.
    let r = form(&reader, &b, "/console/dlq/delete", &[("id", &id_a)]).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let (_, l) = a.get(&format!("/api/v1/dlq?queue={qa}")).await;
    assert_eq!(l["pagination"]["total"], 1);
    // B's admin cannot reach A's dead letter either.
    let b_cookie = format!("queen_token={}", token(tb, "admin"));
    let r = form(
        &client(Some(&b_cookie)),
        &b,
        "/console/dlq/delete",
        &[("id", &id_a)],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let (_, l) = a.get(&format!("/api/v1/dlq?queue={qa}")).await;
    assert_eq!(
        l["pagination"]["total"], 1,
        "another tenant's row is not deleted"
    );
}

/// The sign-in form takes the origin check every console form takes (docs/console.md): a
/// page of another site posting a valid token would sign the browser into that token's
/// tenant (login CSRF). Refused with 403 and no cookie, by `Origin` or by `Referer`; the
/// broker's own origin signs in.
#[tokio::test]
async fn a_sign_in_from_another_origin_sets_no_cookie() {
    let b = start_with(|c| c.auth = Some(queen_broker::config::AuthConfig::hs256(SECRET))).await;
    let valid = token(Uuid::new_v4(), "admin");
    let url = format!("{}/console/login", b.base);
    for (h, v) in [
        ("origin", "http://evil.example"),
        ("origin", "null"),
        ("referer", "http://evil.example/page"),
    ] {
        let r = client(None)
            .post(&url)
            .header(h, v)
            .form(&[("token", valid.as_str())])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{h}: {v}");
        assert!(r.headers().get("set-cookie").is_none(), "{h}: {v}");
    }
    let own = b.base.trim_start_matches("http://").to_string();
    let r = client(None)
        .post(&url)
        .header("origin", format!("http://{own}"))
        .form(&[("token", valid.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(r.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .starts_with("queen_token="));
}
