//! The `/metrics` text: the broker's own counters (crate::ops::metrics) plus the gauges and
//! counters owned elsewhere — the ack registry, ack fusion, the dedup cache, the
//! connection pool, and the per-queue statistics. It reads what the state hands it; the counters know
//! nothing of it.

use std::fmt::Write;
use std::time::Duration;

use crate::db::Db;
use crate::engine::dedup::DedupStats;
use crate::engine::ephemeral::Store;
use crate::engine::fusion::FusionStats;
use crate::engine::lookups::LookupStats;
use crate::engine::push_fusion::PushFusionStats;
use crate::engine::registry::RegistryStats;
use crate::engine::sealing::SealStats;
use crate::engine::spool::Spool;
use crate::ops::maintenance::MaintenanceStats;
use crate::ops::metrics::{header, label, load, scalar, Metrics};
use crate::ops::shared_state::SharedModes;
use crate::ops::timers::TimerSweeper;

/// What `/metrics` reads from the running broker (`AppState::metric_sources`); None for
/// a fusion that is off.
pub struct Sources<'a> {
    pub metrics: &'a Metrics,
    pub registry_enabled: bool,
    pub registry: RegistryStats,
    pub dedup: DedupStats,
    pub lookups: LookupStats,
    pub sealing: SealStats,
    pub fusion: Option<FusionStats>,
    pub push_fusion: Option<PushFusionStats>,
    pub maintenance: &'a MaintenanceStats,
    pub timers: &'a TimerSweeper,
    pub ephemeral: &'a Store,
    pub pool: deadpool_postgres::Status,
    pub spool: Option<&'a Spool>,
    pub modes: &'a SharedModes,
}

/// The whole `/metrics` text: the broker's counters, the ack registry, ack fusion and the
/// connection pool.
pub fn render(state: &Sources<'_>) -> String {
    let mut out = state.metrics.render();
    let r = state.registry;
    scalar(
        &mut out,
        "queen_ack_registry_enabled",
        "gauge",
        "1 when the ack registry (fast path) is on.",
        u64::from(state.registry_enabled),
    );
    for (name, kind, help, v) in [
        (
            "queen_ack_registry_hits_total",
            "counter",
            "Registry lookups that granted the fast path.",
            r.hits,
        ),
        (
            "queen_ack_registry_misses_total",
            "counter",
            "Registry lookups that did not.",
            r.misses,
        ),
        (
            "queen_ack_registry_entries",
            "gauge",
            "Live registry entries.",
            r.entries,
        ),
        (
            "queen_ack_registry_bytes",
            "gauge",
            "Accounted registry memory (bytes).",
            r.bytes,
        ),
        (
            "queen_ack_registry_recorded_total",
            "counter",
            "Delivered batches registered.",
            r.recorded,
        ),
        (
            "queen_ack_registry_skipped_total",
            "counter",
            "Delivered batches not registered: a transactionId repeated in the batch.",
            r.skipped_repeated_txn,
        ),
    ] {
        scalar(&mut out, name, kind, help, v);
    }
    header(
        &mut out,
        "queen_ack_registry_evictions_total",
        "counter",
        "Registry entries that died other than by a hit, by cause.",
    );
    for (cause, v) in [
        ("ttl", r.evicted_ttl),
        ("lru", r.evicted_lru),
        ("overwrite", r.evicted_overwrite),
        ("sql", r.evicted_sql),
    ] {
        let _ = writeln!(
            out,
            "queen_ack_registry_evictions_total{{cause=\"{cause}\"}} {v}"
        );
    }
    let s = state.sealing;
    for (name, help, v) in [
        (
            "queen_payloads_sealed_total",
            "Payloads encrypted with QUEEN_ENCRYPTION_KEY on push (encryptionEnabled queues).",
            s.sealed,
        ),
        (
            "queen_payloads_opened_total",
            "Encrypted payloads decrypted for a reader (pop, fetch, DLQ, message by address).",
            s.opened,
        ),
        (
            "queen_payloads_unopened_total",
            "Encrypted payloads this broker could not decrypt (no key, another key, tampered); served as their envelope.",
            s.unopened,
        ),
    ] {
        scalar(&mut out, name, "counter", help, v);
    }
    let d = state.dedup;
    for (name, kind, help, v) in [
        (
            "queen_dedup_cache_bytes",
            "gauge",
            "Accounted push dedup cache memory (bytes; QUEEN_DEDUP_CACHE_MB bounds it).",
            d.bytes,
        ),
        (
            "queen_dedup_cache_hashes",
            "gauge",
            "TransactionId hashes held by the push dedup cache.",
            d.hashes,
        ),
        (
            "queen_dedup_cache_partitions",
            "gauge",
            "Partitions held by the push dedup cache.",
            d.partitions,
        ),
        (
            "queen_dedup_cache_loads_total",
            "counter",
            "Dedup windows read from the database into the cache.",
            d.loads,
        ),
        (
            "queen_dedup_cache_skipped_total",
            "counter",
            "Pushes that did not load an evicted or refused partition (it does not fit).",
            d.skipped,
        ),
        (
            "queen_dedup_cache_too_big_total",
            "counter",
            "Loads given up: the window needs more than half the cache.",
            d.too_big,
        ),
        (
            "queen_dedup_cache_evictions_total",
            "counter",
            "Partitions evicted to keep the cache within QUEEN_DEDUP_CACHE_MB.",
            d.evicted,
        ),
        (
            "queen_dedup_cache_window_grew_total",
            "counter",
            "Cached partitions dropped because their queue's dedup window grew.",
            d.window_grew,
        ),
    ] {
        scalar(&mut out, name, kind, help, v);
    }
    let f = state.fusion.unwrap_or_default();
    scalar(
        &mut out,
        "queen_ack_fusion_enabled",
        "gauge",
        "1 when fast-path acks are fused into log_ack_multi_v1 flushes.",
        u64::from(state.fusion.is_some()),
    );
    for (name, help, v) in [
        (
            "queen_ack_fusion_commits_total",
            "Fusion flushes (log_ack_multi_v1 calls) that committed.",
            f.commits,
        ),
        (
            "queen_ack_fusion_rows_total",
            "Rows carried by committed fusion flushes.",
            f.rows,
        ),
        (
            "queen_ack_fusion_acks_total",
            "Parked acks answered by committed fusion flushes (acks - rows were folded).",
            f.acks,
        ),
        (
            "queen_ack_fusion_inline_total",
            "Acks that found their fusion shard idle and ran one log_ack_at_v1 inline.",
            f.inline,
        ),
        (
            "queen_ack_fusion_rejected_rows_total",
            "Fusion rows the database refused (answered through the SQL path).",
            f.rejected_rows,
        ),
        (
            "queen_ack_fusion_failed_flushes_total",
            "Fusion flushes that failed as a whole (answered through the SQL path).",
            f.failed_flushes,
        ),
    ] {
        scalar(&mut out, name, "counter", help, v);
    }
    let pf = state.push_fusion.unwrap_or_default();
    scalar(
        &mut out,
        "queen_push_fusion_enabled",
        "gauge",
        "1 when concurrent push rounds are fused into one log_push_multi_v1 transaction.",
        u64::from(state.push_fusion.is_some()),
    );
    for (name, help, v) in [
        (
            "queen_push_fusion_commits_total",
            "Fused push flushes (one log_push_multi_v1 for parked rounds) that committed.",
            pf.commits,
        ),
        (
            "queen_push_fusion_rounds_total",
            "Push rounds carried by committed fused flushes (rounds - commits were saved).",
            pf.rounds,
        ),
        (
            "queen_push_fusion_inline_total",
            "Push rounds that found the fusion lane idle and ran alone.",
            pf.inline,
        ),
        (
            "queen_push_fusion_failed_flushes_total",
            "Fused push flushes that failed as a whole (their rounds ran again alone).",
            pf.failed_flushes,
        ),
        (
            "queen_push_fusion_lookup_flushes_total",
            "Fused push lookups (one partitions_lookup_v1 for parked requests of a tenant).",
            pf.lookup_flushes,
        ),
        (
            "queen_push_fusion_lookup_requests_total",
            "Push requests whose lookup rode a fused one (requests - flushes were saved).",
            pf.lookup_requests,
        ),
        (
            "queen_push_lookup_cache_hits_total",
            "Partitions of push requests whose lookup was remembered (QUEEN_LOOKUP_CACHE_MS).",
            state.lookups.hits,
        ),
        (
            "queen_push_lookup_cache_misses_total",
            "Partitions of push requests looked up in the database.",
            state.lookups.misses,
        ),
    ] {
        scalar(&mut out, name, "counter", help, v);
    }
    render_maintenance(&mut out, state.maintenance);
    render_timers(&mut out, state.timers);
    render_ephemeral(&mut out, state.ephemeral);
    render_availability(&mut out, state.spool, state.modes);
    let p = state.pool;
    let in_use = p.size.saturating_sub(p.available);
    for (name, help, v) in [
        (
            "queen_db_pool_in_use",
            "Pooled connections checked out.",
            in_use,
        ),
        (
            "queen_db_pool_idle",
            "Pooled connections open and idle.",
            p.available,
        ),
        ("queen_db_pool_size", "Pooled connections open.", p.size),
        (
            "queen_db_pool_max",
            "Pool capacity (QUEEN_POOL_SIZE).",
            p.max_size,
        ),
        (
            "queen_db_pool_waiting",
            "Tasks waiting for a pooled connection.",
            p.waiting,
        ),
    ] {
        scalar(&mut out, name, "gauge", help, v as u64);
    }
    out
}

/// The push spool (crate::engine::spool) and the maintenance modes
/// (docs/availability.md).
fn render_availability(out: &mut String, spool: Option<&Spool>, modes: &SharedModes) {
    header(
        out,
        "queen_maintenance_mode",
        "gauge",
        "1 when a maintenance mode is on (mode=push: pushes go to the spool; mode=pop: pops answer empty).",
    );
    for (mode, on) in [
        ("push", modes.push_maintenance()),
        ("pop", modes.pop_maintenance()),
    ] {
        let _ = writeln!(
            out,
            "queen_maintenance_mode{{mode=\"{mode}\"}} {}",
            u64::from(on)
        );
    }
    scalar(
        out,
        "queen_spool_enabled",
        "gauge",
        "1 when QUEEN_SPOOL_DIR is set.",
        u64::from(spool.is_some()),
    );
    let Some(s) = spool else {
        return;
    };
    let c = &s.counters;
    header(
        out,
        "queen_spool_records_total",
        "counter",
        "Push spool records by event: spooled, replayed (into their queue), deduplicated \
         (replayed and found there already), refused (to refused.jsonl), torn (unreadable bytes at a file's end, cut at open), \
         damaged (unreadable bytes mid-file, skipped at open: the records after them kept).",
    );
    for (event, v) in [
        ("spooled", load(&c.spooled_records)),
        ("replayed", load(&c.replayed_records)),
        ("deduplicated", load(&c.deduplicated_records)),
        ("refused", load(&c.refused_records)),
        ("torn", load(&c.torn_cuts)),
        ("damaged", load(&c.damaged)),
    ] {
        let _ = writeln!(out, "queen_spool_records_total{{event=\"{event}\"}} {v}");
    }
    let st = s.stats();
    for (name, kind, help, v) in [
        (
            "queen_spool_bytes_total",
            "counter",
            "Bytes written to the push spool.",
            load(&c.spooled_bytes),
        ),
        (
            "queen_spool_replayed_bytes_total",
            "counter",
            "Payload bytes the spool replay wrote into their queues.",
            load(&c.replayed_bytes),
        ),
        (
            "queen_spool_fsyncs_total",
            "counter",
            "Spool group commits (one fdatasync each).",
            load(&c.fsyncs),
        ),
        (
            "queen_spool_full_total",
            "counter",
            "Pushes answered 503 because the spool was full (QUEEN_SPOOL_MAX_BYTES).",
            load(&c.full_refusals),
        ),
        (
            "queen_spool_write_failures_total",
            "counter",
            "Spool group commits the disk refused (their pushes answered 503).",
            load(&c.write_failures),
        ),
        (
            "queen_spool_pending_records",
            "gauge",
            "Records in the spool not yet replayed.",
            st.pending_records,
        ),
        (
            "queen_spool_pending_bytes",
            "gauge",
            "What the pending records count against QUEEN_SPOOL_MAX_BYTES.",
            st.pending_bytes,
        ),
        (
            "queen_spool_oldest_pending_age_seconds",
            "gauge",
            "Age of the oldest record not yet replayed (0 when none).",
            st.oldest_pending_age_ms.unwrap_or(0) / 1000,
        ),
        (
            "queen_spool_database_down",
            "gauge",
            "1 while pushes go to the spool because the database could not be reached.",
            u64::from(s.db_down()),
        ),
    ] {
        scalar(out, name, kind, help, v);
    }
}

/// The timer sweeper's counters (crate::ops::timers).
fn render_timers(out: &mut String, t: &TimerSweeper) {
    header(
        out,
        "queen_timer_sweeps_total",
        "counter",
        "queen.timers_fire_v1() calls by this broker's sweeper, by outcome.",
    );
    for (result, c) in [("ok", &t.sweeps), ("failed", &t.failed)] {
        let _ = writeln!(
            out,
            "queen_timer_sweeps_total{{result=\"{result}\"}} {}",
            load(c)
        );
    }
    for (name, help, c) in [
        (
            "queen_timers_fired_total",
            "Due timers this broker's sweeper delivered into their queues.",
            &t.fired,
        ),
        (
            "queen_timers_duplicate_total",
            "Due timers whose transactionId their queue already held (removed, not delivered twice).",
            &t.duplicates,
        ),
    ] {
        scalar(out, name, "counter", help, load(c));
    }
}

/// The ephemeral rings (crate::engine::ephemeral): messages by event (every drop by its
/// reason, so nothing leaves a ring uncounted), refusals, forwards, and memory gauges.
fn render_ephemeral(out: &mut String, e: &Store) {
    header(
        out,
        "queen_ephemeral_messages_total",
        "counter",
        "Ephemeral messages by event: pushed, delivered, acked, redelivered, and dropped by reason \
         (retry budget, overflow, ttl, reset or delete).",
    );
    for (event, c) in e.stats.events() {
        let _ = writeln!(
            out,
            "queen_ephemeral_messages_total{{event=\"{event}\"}} {}",
            load(c)
        );
    }
    let g = e.gauges();
    for (name, kind, help, v) in [
        (
            "queen_ephemeral_rejected_total",
            "counter",
            "Ephemeral pushes refused (queue full, memory budget, queue or partition limit).",
            load(&e.stats.rejected),
        ),
        (
            "queen_ephemeral_forwarded_total",
            "counter",
            "Ephemeral requests this broker passed on to the queue's owner.",
            load(&e.stats.forwarded),
        ),
        (
            "queen_ephemeral_queues",
            "gauge",
            "Ephemeral queues held by this broker.",
            g.queues,
        ),
        (
            "queen_ephemeral_messages",
            "gauge",
            "Messages in this broker's ephemeral queues.",
            g.messages,
        ),
        (
            "queen_ephemeral_bytes",
            "gauge",
            "Payload bytes in this broker's ephemeral queues.",
            g.bytes,
        ),
    ] {
        scalar(out, name, kind, help, v);
    }
}

/// The maintenance loop's counters (crate::ops::maintenance): deletions per retention rule,
/// evictions, sidecar purge, orphans, runs by outcome, and the last completed run.
fn render_maintenance(out: &mut String, m: &MaintenanceStats) {
    header(
        out,
        "queen_maintenance_runs_total",
        "counter",
        "CALL queen.run_maintenance() by this broker, by outcome (skipped: another runner held the lock).",
    );
    for (result, c) in [
        ("ran", &m.runs),
        ("skipped", &m.skipped),
        ("failed", &m.failed),
    ] {
        let _ = writeln!(
            out,
            "queen_maintenance_runs_total{{result=\"{result}\"}} {}",
            load(c)
        );
    }
    for (name, help, by_rule) in [
        (
            "queen_maintenance_segments_deleted_total",
            "Segments deleted by retention, by rule (expired: retentionSeconds; completed: completedRetentionSeconds).",
            [&m.segments_expired, &m.segments_completed],
        ),
        (
            "queen_maintenance_messages_deleted_total",
            "Messages in the segments deleted by retention, by rule.",
            [&m.messages_expired, &m.messages_completed],
        ),
    ] {
        header(out, name, "counter", help);
        for (rule, c) in ["expired", "completed"].iter().zip(by_rule) {
            let _ = writeln!(out, "{name}{{rule=\"{rule}\"}} {}", load(c));
        }
    }
    for (name, help, c) in [
        (
            "queen_maintenance_messages_evicted_total",
            "Messages consumer groups lost unconsumed to retention (rule 1).",
            &m.evicted,
        ),
        (
            "queen_maintenance_traces_deleted_total",
            "Traces deleted by retention with their messages.",
            &m.traces,
        ),
        (
            "queen_maintenance_sidecar_rows_purged_total",
            "Sidecar (transactionId hash) rows purged past the dedup window.",
            &m.sidecar_rows,
        ),
        (
            "queen_maintenance_orphan_rows_removed_total",
            "Rows of partitions or queues that no longer exist, removed.",
            &m.orphan_rows,
        ),
        (
            "queen_maintenance_kv_expired_total",
            "Key/value rows removed past their expiry.",
            &m.kv_expired,
        ),
    ] {
        scalar(out, name, "counter", help, load(c));
    }
    let last = *m.last.lock().expect("maintenance stats poisoned");
    if let Some(l) = last {
        for (name, help, v) in [
            (
                "queen_maintenance_last_run_timestamp_seconds",
                "When the last completed run ended (Unix time).",
                l.unix_seconds,
            ),
            (
                "queen_maintenance_last_run_duration_seconds",
                "How long the last completed run took.",
                l.duration_seconds,
            ),
            (
                "queen_maintenance_backlog",
                "1 when the last completed run ran out of its time budget with work left.",
                f64::from(u8::from(l.more)),
            ),
        ] {
            header(out, name, "gauge", help);
            let _ = writeln!(out, "{name} {v}");
        }
    }
}

/// How long one reading of the statistics serves `/metrics` scrapes: a scraper (or
/// anyone: /metrics is not authenticated) cannot make the broker query them more often.
pub const QUEUE_GAUGES_TTL: Duration = Duration::from_secs(5);
/// The fold-in label of the series beyond [`MAX_QUEUE_SERIES`].
const OTHER: &str = "__other__";

/// The per-queue and per-(queue, group) gauges from `queen.queue_stats_v1` (every
/// tenant; `tenant` is a label), rendered at most every [`QUEUE_GAUGES_TTL`]. The label
/// sets are bounded by `QUEEN_METRICS_QUEUE_SERIES` per family: the series with the
/// largest lag (per queue: pending) are shown, the rest are added up under
/// `queue="__other__"` (and `group="__other__"`), so sums stay right whatever the number
/// of queues. When the statistics cannot be read, `queen_queue_stats_up 0` only.
pub async fn queue_gauges(db: &Db, metrics: &Metrics, max: usize) -> String {
    if max == 0 {
        return String::new();
    }
    let mut cache = metrics.queue_gauges.lock().await;
    if let Some((at, text)) = cache.as_ref() {
        if at.elapsed() < QUEUE_GAUGES_TTL {
            return text.clone();
        }
    }
    let text = match crate::ops::queue_stats::load(db, None, None).await {
        Ok(queues) => render_queues(&queues, max),
        Err(e) => {
            tracing::warn!("queue statistics for /metrics: {e}");
            let mut out = String::new();
            scalar(
                &mut out,
                "queen_queue_stats_up",
                "gauge",
                QUEUE_STATS_UP_HELP,
                0,
            );
            return out;
        }
    };
    *cache = Some((std::time::Instant::now(), text.clone()));
    text
}

const QUEUE_STATS_UP_HELP: &str = "1 when the queue statistics could be read for this scrape.";

/// One gauge family's values by label set, largest first, folded beyond the bound.
struct Family {
    name: &'static str,
    help: &'static str,
}

/// Per (tenant, queue, group): lag, oldest unconsumed age, leased, retries, DLQ rows.
const GROUP_FAMILIES: [Family; 5] = [
    Family {
        name: "queen_consumer_lag_messages",
        help: "Messages a consumer group has still to consume, summed over the queue's partitions.",
    },
    Family {
        name: "queen_consumer_oldest_unconsumed_age_seconds",
        help: "Age of the oldest message a consumer group has not consumed (0 when caught up).",
    },
    Family {
        name: "queen_consumer_leased_messages",
        help: "Messages under a live lease of the consumer group.",
    },
    Family {
        name: "queen_consumer_retries",
        help: "Retry budget spent on the batches at the group's cursors, summed over partitions.",
    },
    Family {
        name: "queen_consumer_dlq_messages",
        help: "Dead-letter rows the consumer group filed.",
    },
];

/// Per (tenant, queue): retained, pending (slowest reader), dead-letter, partitions.
const QUEUE_FAMILIES: [Family; 4] = [
    Family {
        name: "queen_queue_messages",
        help: "Messages retained in the queue's partitions.",
    },
    Family {
        name: "queen_queue_pending_messages",
        help: "Messages the slowest consumer of each partition has not consumed, summed.",
    },
    Family {
        name: "queen_queue_dlq_messages",
        help: "Dead-letter rows of the queue.",
    },
    Family {
        name: "queen_queue_partitions",
        help: "Partitions of the queue.",
    },
];

/// Keep at most `max` series: the largest `max − 1` (by value `rank`) and one folding the
/// rest (summed, or the maximum for the values in `fold_max`); returns how many folded.
fn bounded<K>(
    mut rows: Vec<(K, Vec<f64>)>,
    max: usize,
    rank: usize,
    other: K,
    fold_max: &[usize],
) -> (Vec<(K, Vec<f64>)>, usize) {
    rows.sort_by(|a, b| b.1[rank].total_cmp(&a.1[rank]));
    if rows.len() <= max {
        return (rows, 0);
    }
    let rest = rows.split_off(max.saturating_sub(1));
    let dropped = rest.len();
    let mut folded = vec![0.0f64; rest[0].1.len()];
    for (_, v) in &rest {
        for (i, x) in v.iter().enumerate() {
            folded[i] = if fold_max.contains(&i) {
                folded[i].max(*x)
            } else {
                folded[i] + x
            };
        }
    }
    rows.push((other, folded));
    (rows, dropped)
}

fn render_queues(queues: &[crate::ops::queue_stats::QueueStats], max: usize) -> String {
    use queen_log::stats::{Figures, GroupTotals};
    let mut per_group: Vec<((String, String, String), Vec<f64>)> = Vec::new();
    let mut per_queue: Vec<((String, String), Vec<f64>)> = Vec::new();
    for q in queues {
        let (tenant, name) = (q.meta.tenant.to_string(), q.meta.name.clone());
        let mut f = Figures::default();
        q.partitions.iter().for_each(|p| f.add(&p.stats.figures()));
        per_queue.push((
            (tenant.clone(), name.clone()),
            vec![
                f.total as f64,
                f.pending as f64,
                f.dead_letter as f64,
                q.partitions.len() as f64,
            ],
        ));
        for g in q.groups() {
            let t = GroupTotals::of(q.cursors().filter(|(_, c)| c.group == g).map(|(_, c)| c));
            per_group.push((
                (tenant.clone(), name.clone(), g.to_string()),
                vec![
                    t.lag as f64,
                    t.max_age_s.unwrap_or(0.0),
                    t.leased_messages as f64,
                    t.retries as f64,
                    t.dlq as f64,
                ],
            ));
        }
    }
    let other = || OTHER.to_string();
    let (groups, dropped_groups) = bounded(per_group, max, 0, (other(), other(), other()), &[1]);
    let (queues, dropped_queues) = bounded(per_queue, max, 1, (other(), other()), &[]);
    let mut out = String::new();
    scalar(
        &mut out,
        "queen_queue_stats_up",
        "gauge",
        QUEUE_STATS_UP_HELP,
        1,
    );
    for (i, fam) in GROUP_FAMILIES.iter().enumerate() {
        header(&mut out, fam.name, "gauge", fam.help);
        for ((t, q, g), v) in &groups {
            let _ = writeln!(
                out,
                "{}{{tenant=\"{}\",queue=\"{}\",group=\"{}\"}} {}",
                fam.name,
                label(t),
                label(q),
                label(g),
                v[i]
            );
        }
    }
    for (i, fam) in QUEUE_FAMILIES.iter().enumerate() {
        header(&mut out, fam.name, "gauge", fam.help);
        for ((t, q), v) in &queues {
            let _ = writeln!(
                out,
                "{}{{tenant=\"{}\",queue=\"{}\"}} {}",
                fam.name,
                label(t),
                label(q),
                v[i]
            );
        }
    }
    scalar(
        &mut out,
        "queen_queue_series_folded",
        "gauge",
        "Series beyond QUEEN_METRICS_QUEUE_SERIES, added up under queue=\"__other__\".",
        (dropped_groups + dropped_queues) as u64,
    );
    out
}

/// Queen's JSON `/metrics` (its `routes/metrics.cpp` keys), with this broker's values:
/// uptime in seconds, requests and pushed messages since start with their average rate
/// per second, the pool, the process's resident memory and CPU time in microseconds.
/// Queen's heap fields are a JavaScript runtime's: 0 here, as Queen's own server answers.
pub fn queen_json(state: &Sources<'_>, usage: crate::ops::process::Usage) -> serde_json::Value {
    let uptime = state.metrics.started.0.elapsed().as_secs_f64();
    let rate = |n: u64| if uptime > 0.0 { n as f64 / uptime } else { 0.0 };
    let requests = state.metrics.requests_total();
    let messages = state
        .metrics
        .messages_pushed
        .load(std::sync::atomic::Ordering::Relaxed);
    serde_json::json!({
        "uptime": uptime.floor(),
        "requests": {"total": requests, "rate": rate(requests)},
        "messages": {"total": messages, "rate": rate(messages)},
        "database": {"poolSize": state.pool.size, "idleConnections": state.pool.available,
                     "waitingRequests": state.pool.waiting},
        "memory": {"rss": usage.rss_bytes, "heapTotal": 0, "heapUsed": 0, "external": 0,
                   "arrayBuffers": 0},
        "cpu": {"user": usage.user_us, "system": usage.system_us},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_spool_the_spool_is_reported_off_and_nothing_else_of_it() {
        let mut out = String::new();
        render_availability(&mut out, None, &SharedModes::default());
        assert!(out.contains("# TYPE queen_spool_enabled gauge\nqueen_spool_enabled 0\n"));
        assert_eq!(
            out.matches("queen_spool_").count(),
            3,
            "HELP, TYPE, value: {out}"
        );
    }

    #[test]
    fn queue_series_beyond_the_bound_fold_into_one_keeping_sums_and_maxima() {
        let rows: Vec<(u32, Vec<f64>)> = (0..10)
            .map(|i| (i, vec![f64::from(i), 100.0 - f64::from(i)]))
            .collect();
        let (kept, folded) = bounded(rows.clone(), 4, 0, 99, &[1]);
        assert_eq!(folded, 7);
        assert_eq!(
            kept.iter().map(|r| r.0).collect::<Vec<_>>(),
            [9, 8, 7, 99],
            "largest first, then the fold"
        );
        assert_eq!(
            kept[3].1,
            vec![21.0, 100.0],
            "sum of 0..=6, max of the second value"
        );
        let (all, none) = bounded(rows, 10, 0, 99, &[]);
        assert_eq!((all.len(), none), (10, 0));
    }
}
