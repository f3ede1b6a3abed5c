//! The sampled history (crate::db::history) in the shapes of Queen's status and analytics
//! answers (`get_status_v3`, `get_system_metrics_v1`, `get_worker_metrics_timeseries_v1`,
//! `get_queue_ops_v1`, `get_queue_parked_per_replica_v1`, `get_queue_lag_v1`,
//! `get_retention_timeseries_v1`, `get_analytics_v1`). Pure: buckets in, JSON out. What this engine does not measure
//! (an event loop's lag, a job queue) is `null`, never a made-up 0
//! (docs/observability.md lists each key and its source).

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde_json::{json, Value};

use crate::db::history::{BrokerBucket, LifecycleBucket, ParkedBucket, QueueBucket};
use crate::util::iso_ms;

/// Queen's bucket width for a range: about 60 points at most.
pub fn bucket_minutes(from: DateTime<Utc>, to: DateTime<Utc>) -> i32 {
    match (to - from).num_minutes() {
        m if m <= 60 => 1,
        m if m <= 360 => 5,
        m if m <= 1440 => 15,
        m if m <= 10080 => 60,
        _ => 360,
    }
}

/// Queen's bucket timestamps: whole seconds, UTC.
fn stamp(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn per_second(n: i64, bucket_minutes: i32) -> f64 {
    round2(n as f64 / (f64::from(bucket_minutes) * 60.0))
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// CPU time spent in a bucket as a percentage of one core over the bucket.
fn cpu_pct(us: i64, bucket_minutes: i32) -> f64 {
    round2(us as f64 / (f64::from(bucket_minutes) * 60.0 * 1e6) * 100.0)
}

pub fn time_range(from: DateTime<Utc>, to: DateTime<Utc>) -> Value {
    json!({"from": iso_ms(from), "to": iso_ms(to)})
}

/// Every broker's figures of one bucket, added up (gauges averaged over the brokers).
#[derive(Default)]
struct AllBrokers {
    brokers: usize,
    b: BrokerBucket,
    rss_sum: f64,
    pool_size: f64,
    pool_idle: f64,
}

/// The smaller of two values where either may be unknown.
fn min_known(a: Option<i32>, b: Option<i32>) -> Option<i32> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    }
}

fn by_bucket(rows: &[BrokerBucket]) -> BTreeMap<DateTime<Utc>, AllBrokers> {
    let mut out: BTreeMap<DateTime<Utc>, AllBrokers> = BTreeMap::new();
    for r in rows {
        let a = out.entry(r.bucket).or_default();
        a.brokers += 1;
        let b = &mut a.b;
        b.push_requests += r.push_requests;
        b.push_messages += r.push_messages;
        b.pop_requests += r.pop_requests;
        b.pop_messages += r.pop_messages;
        b.pop_empty += r.pop_empty;
        b.ack_requests += r.ack_requests;
        b.ack_messages += r.ack_messages;
        b.ack_failed += r.ack_failed;
        b.transactions += r.transactions;
        b.dlq += r.dlq;
        b.server_errors += r.server_errors;
        b.db_errors += r.db_errors;
        b.cpu_user_us += r.cpu_user_us;
        b.cpu_system_us += r.cpu_system_us;
        b.samples += r.samples;
        b.pool_idle_min = min_known(b.pool_idle_min, r.pool_idle_min);
        a.rss_sum += r.rss_bytes_avg.unwrap_or(0) as f64;
        a.pool_size += r.pool_size_avg.unwrap_or(0.0);
        a.pool_idle += r.pool_idle_avg.unwrap_or(0.0);
    }
    out
}

/// The queues' figures of one bucket, added up.
#[derive(Default, Clone, Copy)]
pub struct QueueTotals {
    pub pushed: i64,
    pub consumed: i64,
    pub max_age_s: Option<i64>,
}

fn queues_by_bucket(rows: &[QueueBucket]) -> BTreeMap<DateTime<Utc>, QueueTotals> {
    let mut out: BTreeMap<DateTime<Utc>, QueueTotals> = BTreeMap::new();
    for r in rows {
        let t = out.entry(r.bucket).or_default();
        t.pushed += r.pushed;
        t.consumed += r.consumed;
        t.max_age_s = t.max_age_s.max(r.oldest_age_s);
    }
    out
}

/// `/api/v1/status`'s `throughput` for the whole system, newest first: the brokers'
/// rows added up, with the oldest unconsumed message's age over every queue (`lag`, per
/// bucket) as its lag.
pub fn system_throughput(
    brokers: &[BrokerBucket],
    lag: &[(DateTime<Utc>, Option<i64>)],
    bucket_minutes: i32,
) -> Vec<Value> {
    let lag: BTreeMap<DateTime<Utc>, i64> =
        lag.iter().filter_map(|(t, a)| a.map(|a| (*t, a))).collect();
    let mut out: Vec<Value> = by_bucket(brokers)
        .iter()
        .map(|(t, a)| {
            let b = &a.b;
            let n = a.brokers.max(1) as f64;
            json!({
                "timestamp": stamp(*t),
                "ingested": b.push_messages, "processed": b.ack_messages,
                "popMessages": b.pop_messages,
                "ingestedPerSecond": per_second(b.push_messages, bucket_minutes),
                "processedPerSecond": per_second(b.ack_messages, bucket_minutes),
                "popPerSecond": per_second(b.pop_messages, bucket_minutes),
                "avgLagMs": Value::Null, "maxLagMs": lag.get(t).map(|s| s * 1000),
                "avgEventLoopLagMs": Value::Null, "maxEventLoopLagMs": Value::Null,
                "minFreeSlots": b.pool_idle_min,
                "dbErrors": b.db_errors, "ackFailed": b.ack_failed, "dlqCount": b.dlq,
                "queenCpuUserPct": round2(cpu_pct(b.cpu_user_us, bucket_minutes) / n),
                "queenCpuSysPct": round2(cpu_pct(b.cpu_system_us, bucket_minutes) / n),
                "queenRssMb": round1(a.rss_sum / n / 1_048_576.0),
                "dbPoolActive": round1((a.pool_size - a.pool_idle) / n),
                "dbPoolIdle": round1(a.pool_idle / n),
                "dbPoolSize": round1(a.pool_size / n),
            })
        })
        .collect();
    out.reverse();
    out
}

/// `/api/v1/status`'s `throughput` of some queues (a queue, namespace or task filter, or
/// a tenant: traffic that is theirs only), newest first, from their snapshots: pushes and
/// consumptions, and the oldest unconsumed message's age as the lag. What the snapshots
/// do not hold (the brokers' health) is null.
pub fn queue_throughput(queues: &[QueueBucket], bucket_minutes: i32) -> Vec<Value> {
    let mut out: Vec<Value> = queues_by_bucket(queues)
        .iter()
        .map(|(t, x)| {
            json!({
                "timestamp": stamp(*t),
                "ingested": x.pushed, "processed": x.consumed, "popMessages": x.consumed,
                "ingestedPerSecond": per_second(x.pushed, bucket_minutes),
                "processedPerSecond": per_second(x.consumed, bucket_minutes),
                "popPerSecond": per_second(x.consumed, bucket_minutes),
                "avgLagMs": Value::Null, "maxLagMs": x.max_age_s.map(|s| s * 1000),
                "avgEventLoopLagMs": Value::Null, "maxEventLoopLagMs": Value::Null,
                "minFreeSlots": Value::Null, "dbErrors": Value::Null,
                "ackFailed": Value::Null, "dlqCount": Value::Null,
                "queenCpuUserPct": Value::Null, "queenCpuSysPct": Value::Null,
                "queenRssMb": Value::Null, "dbPoolActive": Value::Null,
                "dbPoolIdle": Value::Null, "dbPoolSize": Value::Null,
            })
        })
        .collect();
    out.reverse();
    out
}

/// Messages pushed per bucket: by the brokers (the whole system).
pub fn pushed_by_brokers(rows: &[BrokerBucket]) -> BTreeMap<DateTime<Utc>, i64> {
    by_bucket(rows)
        .into_iter()
        .map(|(t, a)| (t, a.b.push_messages))
        .collect()
}

/// Messages pushed per bucket: into the queues of `rows` (their snapshots' growth).
pub fn pushed_into_queues(rows: &[QueueBucket]) -> BTreeMap<DateTime<Utc>, i64> {
    queues_by_bucket(rows)
        .into_iter()
        .map(|(t, x)| (t, x.pushed))
        .collect()
}

/// The newest snapshot of each queue among `rows`.
pub fn latest_per_queue(rows: &[QueueBucket]) -> Vec<&QueueBucket> {
    let mut latest: BTreeMap<&str, &QueueBucket> = BTreeMap::new();
    for r in rows {
        match latest.get(r.queue.as_str()) {
            Some(l) if l.bucket >= r.bucket => {}
            _ => {
                latest.insert(&r.queue, r);
            }
        }
    }
    latest.into_values().collect()
}

/// The request and message totals of the brokers' rows.
pub fn request_totals(rows: &[BrokerBucket]) -> BrokerBucket {
    let mut t = BrokerBucket::default();
    for r in rows {
        t.push_requests += r.push_requests;
        t.push_messages += r.push_messages;
        t.pop_requests += r.pop_requests;
        t.pop_messages += r.pop_messages;
        t.ack_requests += r.ack_requests;
        t.ack_messages += r.ack_messages;
        t.ack_failed += r.ack_failed;
        t.dlq += r.dlq;
        t.db_errors += r.db_errors;
    }
    t
}

fn ratio(n: i64, d: i64) -> f64 {
    if d > 0 {
        round2(n as f64 / d as f64)
    } else {
        0.0
    }
}

/// `/api/v1/status`'s `messages`: what the queues hold (their newest snapshots) and the
/// requests of the range (the brokers' rows; zeros without them).
pub fn status_messages(latest: &[&QueueBucket], req: &BrokerBucket) -> Value {
    let sum = |f: fn(&QueueBucket) -> i64| latest.iter().map(|q| f(q)).sum::<i64>();
    json!({
        "total": sum(|q| q.messages.unwrap_or(0)),
        "pending": sum(|q| q.lag.unwrap_or(0)),
        "processing": sum(|q| q.leased_messages.unwrap_or(0)),
        "completed": sum(|q| q.consumed_total.unwrap_or(0)),
        "failed": req.ack_failed,
        "deadLetter": sum(|q| q.dlq.unwrap_or(0)),
        "requests": {"push": req.push_requests, "pop": req.pop_requests, "ack": req.ack_requests},
        "batchEfficiency": {
            "push": ratio(req.push_messages, req.push_requests),
            "pop": ratio(req.pop_messages, req.pop_requests),
            "ack": ratio(req.ack_messages, req.ack_requests),
        },
    })
}

/// `/api/v1/status`'s `workers`: one per broker seen in `recent` rows.
pub fn status_workers(recent: &[BrokerBucket]) -> Vec<Value> {
    let mut per: BTreeMap<&str, (&BrokerBucket, i64, Option<i32>, f64)> = BTreeMap::new();
    for r in recent {
        let e =
            per.entry(&r.broker)
                .or_insert((r, 0, r.pool_idle_min, r.pool_size_avg.unwrap_or(0.0)));
        e.1 += r.push_messages + r.ack_messages;
        e.2 = min_known(e.2, r.pool_idle_min);
        e.3 = e.3.max(r.pool_size_avg.unwrap_or(0.0));
    }
    per.values()
        .map(|(r, msgs, free, conns)| {
            json!({
                "hostname": r.hostname, "workerId": r.broker, "port": r.port,
                "avgEventLoopLagMs": Value::Null, "maxEventLoopLagMs": Value::Null,
                "freeSlots": free, "dbConnections": round1(*conns),
                "jobQueueSize": Value::Null, "messagesProcessed": msgs,
            })
        })
        .collect()
}

/// `/api/v1/analytics/worker-metrics`'s `timeSeries`, newest first.
pub fn worker_series(rows: &[BrokerBucket], bucket_minutes: i32) -> Vec<Value> {
    let mut out: Vec<Value> = by_bucket(rows)
        .iter()
        .map(|(t, a)| {
            let b = &a.b;
            let n = a.brokers.max(1) as f64;
            json!({
                "timestamp": stamp(*t),
                "pushMessages": b.push_messages, "popMessages": b.pop_messages,
                "ackMessages": b.ack_messages, "pushRequests": b.push_requests,
                "popRequests": b.pop_requests, "ackRequests": b.ack_requests,
                "jobsDone": b.push_requests + b.pop_requests + b.ack_requests + b.transactions,
                "pushPerSecond": per_second(b.push_messages, bucket_minutes),
                "popPerSecond": per_second(b.pop_messages, bucket_minutes),
                "ackPerSecond": per_second(b.ack_messages, bucket_minutes),
                "avgEventLoopLagMs": Value::Null, "maxEventLoopLagMs": Value::Null,
                "avgFreeSlots": round1(a.pool_idle / n), "minFreeSlots": b.pool_idle_min,
                "dbConnections": round1(a.pool_size), "avgJobQueueSize": Value::Null,
                "maxJobQueueSize": Value::Null, "backoffSize": Value::Null,
                "avgLagMs": Value::Null, "maxLagMs": Value::Null, "lagCount": Value::Null,
                "dbErrors": b.db_errors, "ackSuccess": b.ack_messages - b.ack_failed,
                "ackFailed": b.ack_failed, "dlqCount": b.dlq,
                "popEmpty": b.pop_empty, "transactions": b.transactions,
                "serverErrors": b.server_errors,
            })
        })
        .collect();
    out.reverse();
    out
}

/// `/api/v1/analytics/worker-metrics`'s `summary`: totals of the range.
pub fn worker_summary(rows: &[BrokerBucket]) -> Value {
    let t = request_totals(rows);
    json!({
        "totalPushMessages": t.push_messages, "totalPopMessages": t.pop_messages,
        "totalAckMessages": t.ack_messages, "totalPushRequests": t.push_requests,
        "totalPopRequests": t.pop_requests, "totalAckRequests": t.ack_requests,
        "totalDbErrors": t.db_errors, "totalAckFailed": t.ack_failed, "totalDlq": t.dlq,
        "pendingMessages": (t.push_messages - t.pop_messages).max(0),
    })
}

/// A gauge in Queen's system-metrics form.
fn stat(avg: Option<f64>, min: Option<f64>, max: Option<f64>, last: Option<f64>) -> Value {
    json!({"avg": avg, "min": min, "max": max, "last": last})
}

/// `/api/v1/analytics/system-metrics`'s `replicas`: one per broker, its buckets oldest
/// first. CPU is in Queen's unit (percent × 100 of one core) and memory in bytes.
pub fn system_replicas(rows: &[BrokerBucket], bucket_minutes: i32) -> Vec<Value> {
    let mut per: BTreeMap<&str, Vec<&BrokerBucket>> = BTreeMap::new();
    for r in rows {
        per.entry(&r.broker).or_default().push(r);
    }
    per.values()
        .map(|rs| {
            let series: Vec<Value> = rs
                .iter()
                .map(|r| {
                    let user = cpu_pct(r.cpu_user_us, bucket_minutes) * 100.0;
                    let sys = cpu_pct(r.cpu_system_us, bucket_minutes) * 100.0;
                    let rss = r.rss_bytes_avg.map(|x| x as f64);
                    let size = r.pool_size_avg;
                    let idle = r.pool_idle_avg;
                    let active = size.zip(idle).map(|(s, i)| s - i);
                    json!({
                        "timestamp": iso_ms(r.bucket),
                        "sampleCount": r.samples,
                        "metrics": {
                            "cpu": {
                                "user_us": stat(Some(user), None, None, Some(user)),
                                "system_us": stat(Some(sys), None, None, Some(sys)),
                            },
                            "memory": {
                                "rss_bytes": stat(rss, None, Some(r.rss_bytes_max as f64), rss),
                            },
                            "database": {
                                "pool_size": stat(size, None, None, size),
                                "pool_idle": stat(idle, r.pool_idle_min.map(f64::from), None, idle),
                                "pool_active": stat(active, None, None, active),
                            },
                            "parked": stat(r.parked_avg, None, Some(f64::from(r.parked_max)), r.parked_avg),
                        },
                    })
                })
                .collect();
            let r = rs[0];
            json!({"hostname": r.hostname, "port": r.port, "workerId": r.broker, "timeSeries": series})
        })
        .collect()
}

/// The long-polls parked per (bucket, queue) over every broker: the sum of each
/// broker's average (Queen's cluster-wide `parkedCount`).
pub fn parked_per_queue(rows: &[ParkedBucket]) -> BTreeMap<(DateTime<Utc>, &str), f64> {
    let mut out = BTreeMap::new();
    for r in rows {
        *out.entry((r.bucket, r.queue.as_str())).or_default() += r.parked_avg.unwrap_or(0.0);
    }
    out
}

/// `/api/v1/analytics/queue-ops`'s `series`, oldest first. Per queue this engine
/// measures pushes and consumptions (the snapshots' growth), the partitions, lag and
/// DLQ depth, and the long-polls parked on it (`parked`: [`parked_per_queue`]; a queue
/// with none sampled parked counts 0); request counts per queue are not sampled (null).
pub fn queue_ops_series(
    rows: &[QueueBucket],
    parked: &BTreeMap<(DateTime<Utc>, &str), f64>,
    bucket_minutes: i32,
) -> Vec<Value> {
    rows.iter()
        .map(|r| {
            let parked = parked.get(&(r.bucket, r.queue.as_str())).copied();
            json!({
                "bucket": stamp(r.bucket), "queueName": r.queue,
                "pushRequests": Value::Null, "pushMessages": r.pushed,
                "popMessages": r.consumed, "popEmpty": Value::Null,
                "ackRequests": Value::Null, "ackSuccess": r.consumed, "ackFailed": Value::Null,
                "transactions": Value::Null, "partitionsCreated": Value::Null,
                "partitionsDeleted": Value::Null, "partitionCount": r.partitions,
                "avgLagMs": Value::Null, "maxLagMs": r.oldest_age_s.map(|s| s * 1000),
                "pushPerSecond": per_second(r.pushed, bucket_minutes),
                "popPerSecond": per_second(r.consumed, bucket_minutes),
                "ackPerSecond": per_second(r.consumed, bucket_minutes),
                "emptyPerSecond": Value::Null, "parkedCount": round2(parked.unwrap_or(0.0)),
                "lag": r.lag, "dlq": r.dlq, "messages": r.messages,
            })
        })
        .collect()
}

/// `/api/v1/analytics/queue-parked-replicas`: the `series` (one element per bucket,
/// queue and broker with long-polls parked, oldest first) and the `replicas` seen in
/// them. A broker is Queen's replica: `hostname` and `workerId` (its `hostname:port`).
pub fn parked_replicas(rows: &[ParkedBucket]) -> (Vec<Value>, Vec<Value>) {
    let series = rows
        .iter()
        .map(|r| {
            json!({
                "bucket": stamp(r.bucket), "queueName": r.queue, "hostname": r.hostname,
                "workerId": r.broker, "parkedCount": r.parked_avg.unwrap_or(0.0),
                "parkedMax": r.parked_max,
            })
        })
        .collect();
    let mut replicas: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r.hostname.as_str(), r.broker.as_str()))
        .collect();
    replicas.sort_unstable();
    replicas.dedup();
    let replicas = replicas
        .into_iter()
        .map(|(h, w)| json!({"hostname": h, "workerId": w}))
        .collect();
    (series, replicas)
}

/// `/api/v1/analytics/queue-lag`: one element per queue and bucket, newest first.
pub fn queue_lag(rows: &[QueueBucket]) -> Vec<Value> {
    let mut out: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "queueName": r.queue, "popCount": r.consumed, "avgLagMs": Value::Null,
                "maxLagMs": r.oldest_age_s.map(|s| s * 1000), "lag": r.lag,
                "bucketTime": stamp(r.bucket),
            })
        })
        .collect();
    out.reverse();
    out
}

/// `/api/v1/analytics/retention`: what the lifecycle removed, per bucket and in total.
/// Queen's `retentionMsgs` (retentionSeconds) and `completedRetentionMsgs` are one
/// figure here (a segment goes when both allow it): `messages`; `evictionMsgs` are the
/// messages removed before a group consumed them (`evicted`).
pub fn retention(rows: &[LifecycleBucket]) -> (Vec<Value>, Value) {
    let series = rows
        .iter()
        .map(|r| {
            json!({
                "bucket": stamp(r.bucket), "retentionMsgs": r.messages - r.expired_messages,
                "completedRetentionMsgs": Value::Null, "evictionMsgs": r.evicted,
                "expiredMsgs": r.expired_messages, "totalMsgs": r.messages,
                "eventCount": r.runs, "segments": r.segments, "sidecarRows": r.sidecar_rows,
            })
        })
        .collect();
    let sum = |f: fn(&LifecycleBucket) -> i64| rows.iter().map(f).sum::<i64>();
    let totals = json!({
        "retentionMsgs": sum(|r| r.messages - r.expired_messages),
        "completedRetentionMsgs": Value::Null, "evictionMsgs": sum(|r| r.evicted),
        "expiredMsgs": sum(|r| r.expired_messages), "totalMsgs": sum(|r| r.messages),
        "eventCount": sum(|r| r.runs),
    });
    (series, totals)
}

/// `/api/v1/status/analytics`'s `dataPoints`: messages pushed per bucket (`pushed`),
/// every bucket of the range present (0 where nothing was pushed), oldest first.
pub fn pushed_points(
    pushed: &BTreeMap<DateTime<Utc>, i64>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    bucket_minutes: i32,
) -> Vec<Value> {
    let width = Duration::minutes(i64::from(bucket_minutes));
    let epoch = DateTime::<Utc>::from_timestamp(946_684_800, 0).expect("2000-01-01");
    let first = epoch + width * (((from - epoch).num_minutes() / width.num_minutes()) as i32);
    let mut out = Vec::new();
    let mut t = first;
    while t <= to && out.len() < 10_000 {
        out.push(json!({"timestamp": iso_ms(t), "messages": pushed.get(&t).copied().unwrap_or(0)}));
        t += width;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn buckets_widen_with_the_range_as_queens_do() {
        let t = at("2026-01-01T12:00:00Z");
        assert_eq!(bucket_minutes(t - Duration::minutes(60), t), 1);
        assert_eq!(bucket_minutes(t - Duration::minutes(61), t), 5);
        assert_eq!(bucket_minutes(t - Duration::hours(24), t), 15);
        assert_eq!(bucket_minutes(t - Duration::days(7), t), 60);
        assert_eq!(bucket_minutes(t - Duration::days(8), t), 360);
    }

    fn broker(b: &str, t: &str, push: i64, cpu_us: i64) -> BrokerBucket {
        BrokerBucket {
            bucket: at(t),
            broker: b.into(),
            hostname: "h".into(),
            push_messages: push,
            cpu_user_us: cpu_us,
            samples: 6,
            rss_bytes_avg: Some(64 << 20),
            pool_size_avg: Some(10.0),
            pool_idle_avg: Some(8.0),
            pool_idle_min: Some(7),
            ..BrokerBucket::default()
        }
    }

    #[test]
    fn throughput_adds_brokers_and_averages_their_gauges_newest_first() {
        let rows = [
            broker("a", "2026-01-01T12:00:00Z", 600, 30_000_000),
            broker("b", "2026-01-01T12:00:00Z", 600, 30_000_000),
            broker("a", "2026-01-01T12:01:00Z", 60, 0),
        ];
        let lag = [(at("2026-01-01T12:00:00Z"), Some(4))];
        let t = system_throughput(&rows, &lag, 1);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0]["timestamp"], "2026-01-01T12:01:00Z");
        assert_eq!(t[1]["ingested"], 1200);
        assert_eq!(t[1]["ingestedPerSecond"], 20.0);
        // 30 s of CPU in a 60 s bucket on each broker: 50 % each, 50 % averaged.
        assert_eq!(t[1]["queenCpuUserPct"], 50.0);
        assert_eq!(t[1]["queenRssMb"], 64.0);
        assert_eq!(t[1]["dbPoolActive"], 2.0);
        assert_eq!(t[1]["minFreeSlots"], 7);
        assert!(t[1]["avgEventLoopLagMs"].is_null());
        assert_eq!(t[1]["maxLagMs"], 4000);
        assert!(t[0]["maxLagMs"].is_null());
    }

    #[test]
    fn a_filtered_status_counts_the_queues_only() {
        let q = QueueBucket {
            bucket: at("2026-01-01T12:00:00Z"),
            queue: "q".into(),
            pushed: 120,
            consumed: 60,
            oldest_age_s: Some(3),
            ..QueueBucket::default()
        };
        let t = queue_throughput(&[q], 1);
        assert_eq!(t[0]["ingested"], 120);
        assert_eq!(t[0]["processedPerSecond"], 1.0);
        assert_eq!(t[0]["maxLagMs"], 3000);
        assert!(t[0]["queenCpuUserPct"].is_null());
    }

    #[test]
    fn every_bucket_of_the_range_has_a_point() {
        let q = QueueBucket {
            bucket: at("2026-01-01T12:02:00Z"),
            queue: "q".into(),
            pushed: 5,
            ..QueueBucket::default()
        };
        let p = pushed_points(
            &pushed_into_queues(&[q]),
            at("2026-01-01T12:00:30Z"),
            at("2026-01-01T12:04:00Z"),
            1,
        );
        assert_eq!(p.len(), 5);
        assert_eq!(p[0]["timestamp"], "2026-01-01T12:00:00.000Z");
        assert_eq!(p[2]["messages"], 5);
        assert_eq!(p[3]["messages"], 0);
    }

    #[test]
    fn the_newest_snapshot_of_each_queue_is_kept() {
        let mk = |t: &str, q: &str, m: i64| QueueBucket {
            bucket: at(t),
            queue: q.into(),
            messages: Some(m),
            ..QueueBucket::default()
        };
        let rows = [
            mk("2026-01-01T12:00:00Z", "a", 1),
            mk("2026-01-01T12:01:00Z", "a", 2),
            mk("2026-01-01T12:00:00Z", "b", 3),
        ];
        let l = latest_per_queue(&rows);
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].messages, Some(2));
        assert_eq!(l[1].messages, Some(3));
    }

    #[test]
    fn parked_long_polls_add_up_over_brokers_and_name_each_replica_once() {
        let mk = |t: &str, q: &str, broker: &str, avg: f64| ParkedBucket {
            bucket: at(t),
            queue: q.into(),
            broker: broker.into(),
            hostname: "h".into(),
            parked_avg: Some(avg),
            parked_max: 3,
        };
        let rows = [
            mk("2026-01-01T12:00:00Z", "a", "h:1", 1.5),
            mk("2026-01-01T12:00:00Z", "a", "h:2", 2.0),
            mk("2026-01-01T12:01:00Z", "b", "h:1", 0.25),
        ];
        let per_queue = parked_per_queue(&rows);
        assert_eq!(per_queue[&(at("2026-01-01T12:00:00Z"), "a")], 3.5);
        assert_eq!(per_queue[&(at("2026-01-01T12:01:00Z"), "b")], 0.25);
        let (series, replicas) = parked_replicas(&rows);
        assert_eq!(series.len(), 3);
        assert_eq!(series[0]["bucket"], "2026-01-01T12:00:00Z");
        assert_eq!(series[0]["workerId"], "h:1");
        assert_eq!(series[2]["parkedCount"], 0.25);
        assert_eq!(
            replicas,
            vec![
                json!({"hostname": "h", "workerId": "h:1"}),
                json!({"hostname": "h", "workerId": "h:2"})
            ]
        );
        let q = QueueBucket {
            bucket: at("2026-01-01T12:00:00Z"),
            queue: "a".into(),
            ..QueueBucket::default()
        };
        let other = QueueBucket {
            queue: "c".into(),
            ..q.clone()
        };
        let ops = queue_ops_series(&[q, other], &per_queue, 1);
        assert_eq!(ops[0]["parkedCount"], 3.5);
        assert_eq!(ops[1]["parkedCount"], 0.0, "none sampled parked");
    }
}
