//! The console's pages (maud: every value escaped at compile time). Each takes what its
//! handler read and returns the whole document; nothing here reads the database.

use maud::{html, Markup, DOCTYPE};
use queen_log::wire::DlqEntry;
use uuid::Uuid;

use super::chart;

/// The pages, for the navigation bar.
const NAV: [(&str, &str); 6] = [
    ("/console/queues", "Queues"),
    ("/console/groups", "Consumer groups"),
    ("/console/dlq", "Dead letters"),
    ("/console/throughput", "Throughput"),
    ("/console/lifecycle", "Lifecycle"),
    ("/console/maintenance", "Maintenance"),
];

/// The document around a page's body.
pub fn layout(title: &str, active: &str, tenant: Option<Uuid>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · queen console" }
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/console.js" defer {}
            }
            body {
                header {
                    strong { "queen console" }
                    nav {
                        @for (href, name) in NAV {
                            a href=(href) class=[(href == active).then_some("active")] { (name) }
                        }
                    }
                    @if let Some(t) = tenant { span class="tenant" { "tenant " code { (t) } } }
                }
                main { h1 { (title) } (body) }
            }
        }
    }
}

/// A notice above a page (what an action did, or why it did not).
pub fn notice(text: Option<&str>) -> Markup {
    html! { @if let Some(t) = text { p class="notice" role="status" { (t) } } }
}

/// One row of the queue list.
pub struct QueueLine {
    pub name: String,
    pub namespace: Option<String>,
    pub partitions: usize,
    pub messages: i64,
    pub pending: i64,
    pub processing: i64,
    pub dead_letter: i64,
    pub lag: i64,
    pub oldest_age_s: Option<f64>,
    pub pushed_per_minute: Vec<f64>,
}

/// One page (`at` of `pages`) of the `total` queues.
pub fn queues(lines: &[QueueLine], total: usize, at: usize, pages: usize) -> Markup {
    html! {
        p { (total) " queues" @if pages > 1 { ", page " (at) " of " (pages) } ". Throughput: \
            messages pushed per minute over the last hour (the sampled history)." }
        table {
            thead { tr {
                th { "queue" } th { "namespace" } th class="n" { "partitions" }
                th class="n" { "messages" } th class="n" { "pending" } th class="n" { "processing" }
                th class="n" { "lag" } th class="n" { "oldest unconsumed" } th class="n" { "DLQ" }
                th { "pushed / min, 1 h" }
            } }
            tbody {
                @for q in lines {
                    tr {
                        td { a href=(format!("/console/queues/{}", urlencode(&q.name))) { (q.name) } }
                        td { (q.namespace.as_deref().unwrap_or("")) }
                        td class="n" { (q.partitions) } td class="n" { (q.messages) }
                        td class="n" { (q.pending) } td class="n" { (q.processing) }
                        td class="n" { (q.lag) } td class="n" { (age(q.oldest_age_s)) }
                        td class="n" {
                            @if q.dead_letter > 0 {
                                a href=(format!("/console/dlq?queue={}", urlencode(&q.name))) { (q.dead_letter) }
                            } @else { "0" }
                        }
                        td { (chart::sparkline(&q.pushed_per_minute)) }
                    }
                }
            }
        }
        @if pages > 1 {
            p class="pager" {
                @if at > 1 { a href=(format!("/console/queues?page={}", at - 1)) { "Previous" } " " }
                @if at < pages { a href=(format!("/console/queues?page={}", at + 1)) { "Next" } }
            }
        }
    }
}

/// One partition of a queue, with its groups' cursors.
pub struct PartitionLine {
    pub name: String,
    pub messages: i64,
    pub log_start: i64,
    pub last_offset: i64,
    pub cursors: Vec<(String, i64, i64, bool)>,
}

/// One group of a queue: partitions, lag, oldest age, leased partitions.
pub struct GroupLine {
    pub queue: String,
    pub group: String,
    pub partitions: usize,
    pub lag: i64,
    pub oldest_age_s: Option<f64>,
    pub leased: usize,
}

pub fn queue(
    name: &str,
    options: &serde_json::Value,
    parts: &[PartitionLine],
    groups: &[GroupLine],
) -> Markup {
    html! {
        h2 { "Options in force" }
        table class="kv" {
            @if let Some(o) = options.as_object() {
                @for (k, v) in o { tr { th { (k) } td { code { (v) } } } }
            }
        }
        h2 { "Consumer groups" }
        (group_table(groups, false))
        h2 { "Partitions (" (parts.len()) ")" }
        table {
            thead { tr { th { "partition" } th class="n" { "messages" } th class="n" { "offsets" }
                         th { "cursors: group (committed, lag)" } } }
            tbody {
                @for p in parts {
                    tr {
                        td { (p.name) } td class="n" { (p.messages) }
                        td class="n" { (p.log_start) " … " (p.last_offset) }
                        td {
                            @for (g, committed, lag, leased) in &p.cursors {
                                span class="cursor" { (display_group(g)) " (" (committed) ", " (lag)
                                    @if *leased { ", leased" } ")" } " "
                            }
                        }
                    }
                }
            }
        }
        p { a href=(format!("/console/dlq?queue={}", urlencode(name))) { "Dead letters of " (name) } }
    }
}

fn display_group(g: &str) -> &str {
    if g == queen_log::conventions::QUEUE_MODE {
        "queue mode"
    } else {
        g
    }
}

fn group_table(groups: &[GroupLine], actions: bool) -> Markup {
    html! {
        table {
            thead { tr {
                th { "group" } th { "queue" } th class="n" { "partitions" } th class="n" { "lag" }
                th class="n" { "oldest unconsumed" } th class="n" { "leased" }
                @if actions { th { "" } }
            } }
            tbody {
                @for g in groups {
                    tr {
                        td { (display_group(&g.group)) } td { (g.queue) }
                        td class="n" { (g.partitions) } td class="n" { (g.lag) }
                        td class="n" { (age(g.oldest_age_s)) } td class="n" { (g.leased) }
                        @if actions {
                            td {
                                @if g.group != queen_log::conventions::QUEUE_MODE {
                                    form method="post" action="/console/groups/delete" data-confirm=(format!("Delete group {} on {}?", g.group, g.queue)) {
                                        input type="hidden" name="group" value=(g.group);
                                        input type="hidden" name="queue" value=(g.queue);
                                        button type="submit" { "Delete" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

pub fn groups(groups: &[GroupLine]) -> Markup {
    html! {
        p { "Every (group, queue) with a cursor. Deleting a group removes its cursors and \
             leases on that queue (admin)." }
        (group_table(groups, true))
    }
}

/// A payload for display: pretty JSON, cut at 2,000 characters.
fn payload(d: Option<&serde_json::value::RawValue>) -> String {
    let Some(raw) = d else { return String::new() };
    let text = serde_json::from_str::<serde_json::Value>(raw.get())
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| raw.get().to_string());
    if text.chars().count() > 2000 {
        text.chars().take(2000).collect::<String>() + " …"
    } else {
        text
    }
}

pub fn dlq(queue: Option<&str>, total: i64, rows: &[DlqEntry], offset: i64) -> Markup {
    html! {
        form method="get" action="/console/dlq" class="filter" {
            label { "queue " input name="queue" value=(queue.unwrap_or("")); }
            button type="submit" { "Show" }
        }
        p { (total) " dead letters" @if let Some(q) = queue { " in " (q) } "." }
        @for m in rows {
            article class="dlq" data-dlq-id=(m.dlq_id) {
                p {
                    strong { (m.queue) "/" (m.partition) } " · group " (display_group(&m.consumer_group))
                    " · offset " (m.offset) " · failed " (m.failed_at)
                    @if let Some(t) = &m.transaction_id { " · " code { (t) } }
                }
                p class="error" { (m.error_message.as_deref().unwrap_or("(no error text)")) }
                pre { (payload(m.data.as_deref())) }
                div class="actions" {
                    form method="post" action="/console/dlq/redrive" {
                        input type="hidden" name="id" value=(m.dlq_id);
                        @if let Some(q) = queue { input type="hidden" name="queue" value=(q); }
                        button type="submit" { "Redrive" }
                    }
                    form method="post" action="/console/dlq/delete" data-confirm="Delete this dead letter?" {
                        input type="hidden" name="id" value=(m.dlq_id);
                        @if let Some(q) = queue { input type="hidden" name="queue" value=(q); }
                        button type="submit" class="danger" { "Delete" }
                    }
                }
            }
        }
        @if offset + (rows.len() as i64) < total {
            p { a href=(format!("/console/dlq?offset={}{}", offset + rows.len() as i64,
                    queue.map(|q| format!("&queue={}", urlencode(q))).unwrap_or_default())) { "Next page" } }
        }
    }
}

/// What the maintenance page shows.
pub struct MaintenanceView {
    pub push: bool,
    pub pop: bool,
    pub spool: Option<(u64, u64, u64)>,
}

pub fn maintenance(v: &MaintenanceView) -> Markup {
    let row = |mode: &str, what: &str, on: bool| {
        html! {
            tr {
                th { (what) } td class=(if on { "on" } else { "off" }) { (if on { "on" } else { "off" }) }
                td {
                    form method="post" action="/console/maintenance"
                         data-confirm=(format!("Turn {what} {}?", if on { "off" } else { "on" })) {
                        input type="hidden" name="mode" value=(mode);
                        input type="hidden" name="enabled" value=(if on { "false" } else { "true" });
                        button type="submit" { "Turn " (if on { "off" } else { "on" }) }
                    }
                }
            }
        }
    };
    html! {
        p { "Shared by every broker of the database (docs/availability.md). Push maintenance \
             sends every push to the brokers' spools; pop maintenance answers pops empty (admin)." }
        table class="kv" {
            (row("push", "push maintenance", v.push))
            (row("pop", "pop maintenance", v.pop))
        }
        h2 { "This broker's push spool" }
        @match v.spool {
            Some((records, bytes, max)) => p { (records) " records pending, " (bytes) " of " (max) " bytes." },
            None => p { "No spool (QUEEN_SPOOL_DIR is not set)." },
        }
    }
}

/// What the lifecycle page shows.
pub struct LifecycleView {
    pub runs: u64,
    pub failed: u64,
    pub last: Option<(String, f64, bool)>,
    pub removed: Vec<(String, i64, i64, i64, i64)>,
    pub storage: Vec<(String, usize, i64, Option<i32>)>,
}

pub fn lifecycle(v: &LifecycleView) -> Markup {
    html! {
        h2 { "This broker's maintenance loop" }
        p {
            (v.runs) " runs, " (v.failed) " failed. "
            @match &v.last {
                Some((at, secs, more)) => { "Last completed run " (at) ", " (format!("{secs:.2}")) " s"
                    @if *more { " (work left for the next run)" } "." }
                None => "No completed run yet (QUEEN_MAINTENANCE_INTERVAL_MS=0 turns the loop off).",
            }
        }
        h2 { "Removed by retention, last 24 hours" }
        table {
            thead { tr { th { "hour" } th class="n" { "runs" } th class="n" { "messages" }
                         th class="n" { "of which expired" } th class="n" { "evicted unconsumed" } } }
            tbody {
                @for (h, runs, m, e, ev) in &v.removed {
                    tr { td { (h) } td class="n" { (runs) } td class="n" { (m) } td class="n" { (e) } td class="n" { (ev) } }
                }
            }
        }
        h2 { "Storage per queue" }
        table {
            thead { tr { th { "queue" } th class="n" { "partitions" } th class="n" { "messages retained" }
                         th class="n" { "retentionSeconds" } } }
            tbody {
                @for (q, p, m, r) in &v.storage {
                    tr { td { (q) } td class="n" { (p) } td class="n" { (m) }
                         td class="n" { (r.map(|r| r.to_string()).unwrap_or_else(|| "–".into())) } }
                }
            }
        }
    }
}

pub fn throughput(
    range: &str,
    labels: &[String],
    pushed: Vec<f64>,
    acked: Vec<f64>,
    brokers: &[(String, i64, i64)],
) -> Markup {
    html! {
        p {
            "Messages per minute over the last " (range) " (every broker's samples; "
            a href="/console/throughput?range=1h" { "1 h" } ", "
            a href="/console/throughput?range=24h" { "24 h" } ")."
        }
        (chart::lines(labels, &[("pushed", "#2563eb", pushed), ("acked", "#16a34a", acked)]))
        h2 { "Per broker" }
        table {
            thead { tr { th { "broker" } th class="n" { "pushed" } th class="n" { "acked" } } }
            tbody { @for (b, p, a) in brokers { tr { td { (b) } td class="n" { (p) } td class="n" { (a) } } } }
        }
    }
}

pub fn login(error: Option<&str>) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "Sign in · queen console" }
                link rel="stylesheet" href="/console/assets/console.css";
            }
            body {
                main class="login" {
                    h1 { "queen console" }
                    p { "Authentication is on: paste the bearer token you use with the API. It is \
                         kept in a cookie for this console only." }
                    (notice(error))
                    form method="post" action="/console/login" {
                        label { "token " input type="password" name="token" autocomplete="off" required; }
                        button type="submit" { "Sign in" }
                    }
                }
            }
        }
    }
}

pub fn error_page(status: u16, text: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head { meta charset="utf-8"; title { (status) " · queen console" }
                   link rel="stylesheet" href="/console/assets/console.css"; }
            body { main { h1 { (status) } p { (text) } p { a href="/console/queues" { "Queues" } } } }
        }
    }
}

fn age(s: Option<f64>) -> String {
    match s {
        None => "–".into(),
        Some(s) if s < 120.0 => format!("{s:.0} s"),
        Some(s) if s < 7200.0 => format!("{:.0} min", s / 60.0),
        Some(s) => format!("{:.1} h", s / 3600.0),
    }
}

/// A path or query component, percent-encoded.
pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped_in_markup_and_encoded_in_links() {
        let q = QueueLine {
            name: "<b>&q".into(),
            namespace: None,
            partitions: 1,
            messages: 0,
            pending: 0,
            processing: 0,
            dead_letter: 2,
            lag: 0,
            oldest_age_s: None,
            pushed_per_minute: vec![],
        };
        let html = queues(&[q], 1, 1, 1).into_string();
        assert!(html.contains("&lt;b&gt;&amp;q"), "{html}");
        assert!(html.contains("/console/queues/%3Cb%3E%26q"), "{html}");
        assert!(!html.contains("<b>&q"));
    }

    #[test]
    fn ages_read_in_their_unit() {
        assert_eq!(age(Some(59.0)), "59 s");
        assert_eq!(age(Some(600.0)), "10 min");
        assert_eq!(age(Some(10800.0)), "3.0 h");
        assert_eq!(age(None), "–");
    }
}
