//! A push (`POST /api/v1/push`, and the spool's replay through [`push_spooled`]): from
//! its items to each item's outcome. Frames, zstd and hashes are encoded here with the
//! shared codec; one segment per (queue, partition) goes through `log_push_multi_v1`.
//!
//! The SQL push writes nothing for a segment in which any frame is a duplicate, so the
//! non-duplicate rest of such a segment is pushed again in a further round. The dedup
//! watermarks come from crate::engine::dedup. A round reaches the database through
//! crate::engine::push_fusion (fused with the rounds of concurrent pushes,
//! `QUEEN_PUSH_FUSION`) or on the request's own connection; either way through the
//! database client's `log_push_multi` (crate::db).
//!
//! With a push spool (`QUEEN_SPOOL_DIR`, docs/availability.md), a push the database
//! cannot take (unreachable, read-only, the pool exhausted), a push in push maintenance
//! mode, and a push to a partition with spooled items not yet replayed go to the spool
//! (the write gate decides, crate::engine::write_gate): its items are `buffered`, and
//! crate::http::spool_replay pushes them later through [`push_spooled`], the same path.

use std::collections::{HashMap, HashSet};

use queen_log::frame::Frame;
use queen_log::hash::{split_hashes, TxnHash};
use queen_log::segment::{encode_segment, segment_hashes};
use queen_log::wire::PushVerdict;
use uuid::Uuid;

use crate::db::error::ENCRYPTION_REQUIRED;
use crate::db::{Conn, PushSegment as Segment};
use crate::engine::dedup::DedupCache;
use crate::engine::items::{
    copy_request_duplicates, group_by_partition, mark_request_duplicates, seal_items, take_ready,
    PushItem, ReadySegment,
};
use crate::engine::lookups::{Known, LookupCache};
use crate::engine::push_fusion::PushFusion;
use crate::engine::spool::{Record as SpoolRecord, Spool};
use crate::engine::write_gate::PushRoute;
use crate::engine::{Counter, Engine};
use crate::error::{ApiError, ApiResult};

/// What happened to an item.
#[derive(Clone, Copy, Default)]
pub struct Outcome {
    pub queued: bool,
    /// Durable in the push spool, to be written by its replay (docs/availability.md).
    pub buffered: bool,
    pub offset: Option<i64>,
    /// Offset of the original when the database reported a duplicate.
    pub original_off: Option<i64>,
    /// The item's partition, when it exists.
    pub partition_id: Option<Uuid>,
}

/// The items of one (queue, partition) still to be pushed, and its id once known.
struct Group {
    queue: String,
    partition: String,
    pending: Vec<usize>,
    pid: Option<Uuid>,
    /// Its queue encrypts payloads (looked up with the partition).
    encrypts: bool,
    /// The client's compressed frames of exactly `pending`, stored as they came in the
    /// first round unless the queue encrypts (crate::http::binary_body).
    ready: Option<Vec<u8>>,
}

/// A push's items, in request order, and what happened to each.
pub struct Pushed {
    pub items: Vec<PushItem>,
    pub outcomes: Vec<Outcome>,
}

/// Pushes `items` for `tenant` (`ready`: a binary body's groups as the client compressed
/// them): to the database, or to the spool when the write gate says so or the database
/// cannot take them now. In-request duplicates answer with their first item's id and
/// outcome; the long-polls the queued items can serve are woken and the items counted.
pub async fn push(
    e: &Engine<'_>,
    tenant: Uuid,
    mut items: Vec<PushItem>,
    mut ready: Vec<ReadySegment>,
) -> ApiResult<Pushed> {
    mark_request_duplicates(items.iter_mut());
    let mut groups = group_items(&items);
    for g in groups.iter_mut() {
        g.ready = take_ready(&mut ready, &g.pending);
    }
    let mut outcomes = vec![Outcome::default(); items.len()];
    let spool = e.spool;
    if spool.is_none() || !spool_first(e, tenant, &groups).await {
        let written = write(e, None, tenant, &mut items, &mut groups, &mut outcomes).await;
        match (written, spool) {
            (Ok(()), _) => {}
            // The database cannot take it now: what is still pending goes to the spool.
            (Err(ApiError::Unreachable { maybe_written, .. }), Some(spool)) => {
                spool.mark_db_down();
                spool_pending(spool, tenant, &items, &groups, &mut outcomes, maybe_written).await?;
            }
            (Err(err), _) => return Err(err),
        }
    } else if let Some(spool) = spool {
        spool_pending(spool, tenant, &items, &groups, &mut outcomes, false).await?;
    }
    copy_request_duplicates(&mut items);
    let pid_of: HashMap<(&str, &str), Option<Uuid>> = groups
        .iter()
        .map(|g| ((g.queue.as_str(), g.partition.as_str()), g.pid))
        .collect();
    for (it, o) in items.iter().zip(outcomes.iter_mut()) {
        o.partition_id = pid_of
            .get(&(it.queue.as_str(), it.partition.as_str()))
            .copied()
            .flatten();
    }
    wake_and_count(e, tenant, &items, &outcomes);
    Ok(Pushed { items, outcomes })
}

/// Pushes spooled items (crate::http::spool_replay) on `db`, the replay's transaction,
/// as a push request would: the same lookups, sealing, dedup and rounds. `window`: the
/// dedup window to search instead of the queue's when it is shorter (records that may
/// have been written before they were spooled). Returns how many were queued; the rest
/// were duplicates. Wakes no long-poll and counts nothing: the replay does both once its
/// transaction commits.
pub async fn push_spooled(
    e: &Engine<'_>,
    db: &Conn,
    tenant: Uuid,
    mut items: Vec<PushItem>,
    window: Option<i32>,
) -> ApiResult<usize> {
    mark_request_duplicates(items.iter_mut());
    let mut groups = group_items(&items);
    let mut outcomes = vec![Outcome::default(); items.len()];
    let on = OnConn { db, window };
    write(e, Some(on), tenant, &mut items, &mut groups, &mut outcomes).await?;
    Ok(outcomes.iter().filter(|o| o.queued).count())
}

/// A connection a push runs on instead of its own (a spool replay's transaction).
#[derive(Clone, Copy)]
struct OnConn<'a> {
    db: &'a Conn,
    window: Option<i32>,
}

/// Whether this push goes to the spool without trying the database: the write gate's
/// answer (crate::engine::write_gate, the one owner of that rule).
async fn spool_first(e: &Engine<'_>, tenant: Uuid, groups: &[Group]) -> bool {
    let keys: Vec<(Uuid, &str, &str)> = groups
        .iter()
        .map(|g| (tenant, g.queue.as_str(), g.partition.as_str()))
        .collect();
    e.gate.push(&keys).await == PushRoute::Spool
}

/// The items still pending, appended to the spool (fsynced) and answered `buffered`.
/// A spool that is full or cannot write answers 503: nothing is promised that is not
/// durable.
async fn spool_pending(
    spool: &Spool,
    tenant: Uuid,
    items: &[PushItem],
    groups: &[Group],
    outcomes: &mut [Outcome],
    maybe_written: bool,
) -> ApiResult<()> {
    let mut pending: Vec<usize> = groups
        .iter()
        .flat_map(|g| g.pending.iter().copied())
        .collect();
    // Request order, so a partition's items replay as the client sent them.
    pending.sort_unstable();
    let records = pending
        .iter()
        .map(|&i| {
            let it = &items[i];
            SpoolRecord {
                seq: 0,
                tenant,
                queue: it.queue.clone(),
                partition: it.partition.clone(),
                txn: it.txn.clone(),
                message_id: it.message_id,
                trace: it.trace,
                encrypted: it.encrypted,
                maybe_written,
                spooled_at_ms: 0,
                payload: it.payload.clone(),
                producer_sub: it.producer_sub.as_deref().map(str::to_owned),
            }
        })
        .collect();
    // Full or unwritable: a 503 that promises nothing (the error names which).
    spool
        .append(records)
        .await
        .map_err(|e| ApiError::Unavailable(e.to_string()))?;
    for i in pending {
        outcomes[i].buffered = true;
    }
    Ok(())
}

/// The database part of a push: the partitions looked up, payloads sealed, dedup
/// watermarks loaded, then rounds until every item is queued or a duplicate. On an
/// error, the items not yet written are those still pending in `groups`.
async fn write(
    e: &Engine<'_>,
    on: Option<OnConn<'_>>,
    tenant: Uuid,
    items: &mut [PushItem],
    groups: &mut [Group],
    outcomes: &mut [Outcome],
) -> ApiResult<()> {
    // With push fusion a push holds no connection of its own: its lookup and its rounds
    // ride the lanes (a dedup load takes one for itself).
    let fused = if on.is_none() { e.push_fusion } else { None };
    let own = match (on, fused) {
        (None, None) => Some(e.db.conn().await?),
        _ => None,
    };
    let via = match (on, fused, &own) {
        (Some(o), _, _) => Via::On(o.db, o.window),
        (None, Some(f), _) => Via::Fused(f),
        (None, None, Some(c)) => Via::Alone(c),
        (None, None, None) => unreachable!("a push has a connection or push fusion"),
    };
    // A replay's lookups are neither remembered nor taken from memory: its transaction
    // reads what it writes.
    let remembered = on.is_none() && e.lookups.enabled();
    match write_looked_up(e, &via, tenant, items, groups, outcomes, remembered).await {
        // A remembered lookup said plaintext and the queue encrypts now (nothing of that
        // round was written): look up afresh, seal, push again (engine/lookups.rs).
        Err(ApiError::Coded { code, .. }) if remembered && code == ENCRYPTION_REQUIRED => {
            for g in groups.iter() {
                e.lookups.forget_queue(tenant, &g.queue);
            }
            write_looked_up(e, &via, tenant, items, groups, outcomes, false).await
        }
        done => done,
    }
}

/// [`write`] after its connection is chosen; `remembered`: the lookup may come from the
/// lookup cache (and what it reads is remembered).
async fn write_looked_up(
    e: &Engine<'_>,
    via: &Via<'_>,
    tenant: Uuid,
    items: &mut [PushItem],
    groups: &mut [Group],
    outcomes: &mut [Outcome],
    remembered: bool,
) -> ApiResult<()> {
    let cache = remembered.then_some(e.lookups);
    let windows = known_partitions(via, cache, tenant, groups).await?;
    let looked: Vec<Option<Uuid>> = groups.iter().map(|g| g.pid).collect();
    let encrypting: HashSet<&str> = groups
        .iter()
        .filter(|g| g.encrypts)
        .map(|g| g.queue.as_str())
        .collect();
    // An item spooled after it was sealed is sealed already.
    seal_items(e.sealer, items, |it| {
        !it.encrypted && encrypting.contains(it.queue.as_str())
    })?;
    let cached = match via {
        // A replay's transaction may still roll back: it must not teach the cache
        // offsets that never commit (and a widened search checks everything anyway).
        Via::On(..) => HashMap::new(),
        _ => dedup_targets(via.conn(), e, groups, &windows).await?,
    };
    // Each round retires at least one item, so this terminates.
    for _ in 0..=items.len() {
        if groups.iter().all(|g| g.pending.is_empty()) {
            break;
        }
        let dedup = (e.dedup, &cached, &windows);
        push_round(via, tenant, items, groups, outcomes, dedup).await?;
    }
    // A partition written under another id than the lookup's was deleted and created
    // again meanwhile: what is remembered of its queue is stale.
    for (g, was) in groups.iter().zip(looked) {
        if was.is_some_and(|p| g.pid != Some(p)) {
            e.lookups.forget_queue(tenant, &g.queue);
        }
    }
    Ok(())
}

/// One group per (queue, partition), by crate::engine::items::group_by_partition.
fn group_items(items: &[PushItem]) -> Vec<Group> {
    group_by_partition(items)
        .into_iter()
        .map(|(queue, partition, pending)| Group {
            queue: queue.to_string(),
            partition: partition.to_string(),
            pending,
            pid: None,
            encrypts: false,
            ready: None,
        })
        .collect()
}

/// The id of every group whose partition exists already, and its queue's dedup window
/// (the dedup cache checks it, engine/dedup.rs) and encryption switch: from `cache`
/// (engine/lookups.rs) when it remembers them, else one lookup per request for the rest,
/// before pushing, the way `via` pushes (fused with concurrent pushes' lookups, or on its
/// connection). Returns the windows of the existing partitions by group.
async fn known_partitions(
    via: &Via<'_>,
    cache: Option<&LookupCache>,
    tenant: Uuid,
    groups: &mut [Group],
) -> ApiResult<HashMap<usize, i32>> {
    let mut windows = HashMap::new();
    let mut ask = Vec::new();
    for (i, g) in groups.iter_mut().enumerate() {
        match cache.and_then(|c| c.get(tenant, &g.queue, &g.partition)) {
            Some(k) => g.learn(i, Some(k.pid), k.window, k.encrypts, &mut windows),
            None => ask.push(i),
        }
    }
    if ask.is_empty() {
        return Ok(windows);
    }
    let qs: Vec<&str> = ask.iter().map(|&i| groups[i].queue.as_str()).collect();
    let ps: Vec<&str> = ask.iter().map(|&i| groups[i].partition.as_str()).collect();
    let found = match via {
        Via::Alone(db) | Via::On(db, _) => db.partitions_lookup(tenant, &qs, &ps).await?,
        Via::Fused(f) => f.lookup(tenant, &qs, &ps).await?,
    };
    for f in found {
        let i = *ask.get(f.index).ok_or_else(|| {
            ApiError::Internal(format!("partitions_lookup_v1 answered index {}", f.index))
        })?;
        let g = &mut groups[i];
        g.learn(i, f.partition_id, f.dedup_window, f.encrypted, &mut windows);
        if let (Some(c), Some(pid)) = (cache, f.partition_id) {
            let known = Known {
                pid,
                window: f.dedup_window,
                encrypts: f.encrypted,
            };
            c.put(tenant, &g.queue, &g.partition, known);
        }
    }
    Ok(windows)
}

impl Group {
    /// What a lookup found for this group (`i`): its queue's switch and, for an existing
    /// partition, its id and window.
    fn learn(
        &mut self,
        i: usize,
        pid: Option<Uuid>,
        window: i32,
        encrypts: bool,
        windows: &mut HashMap<usize, i32>,
    ) {
        self.encrypts = encrypts;
        if encrypts {
            self.ready = None;
        }
        if let Some(pid) = pid {
            self.pid = Some(pid);
            windows.insert(i, window);
        }
    }
}

/// Known partitions with a dedup window, each loaded into the dedup cache if it was not
/// (see engine/dedup.rs). New partitions and window-0 queues are not cached: their pushes
/// probe with -1, which is cheap for them.
/// A load uses `db`, or a connection taken for it (a fused push has none).
async fn dedup_targets(
    db: Option<&Conn>,
    e: &Engine<'_>,
    groups: &[Group],
    windows: &HashMap<usize, i32>,
) -> ApiResult<HashMap<usize, Uuid>> {
    let cache = e.dedup;
    if !cache.enabled() {
        return Ok(HashMap::new());
    }
    let mut taken = None;
    let mut out = HashMap::new();
    for (&g, &window) in windows.iter().filter(|(_, w)| **w > 0) {
        let pid = groups[g]
            .pid
            .expect("a windowed group is a known partition");
        if cache.wants_load(pid, window) {
            let conn = match db {
                Some(c) => c,
                None => &*match &mut taken {
                    Some(c) => c,
                    t @ None => t.insert(e.db.conn().await?),
                },
            };
            cache.load_window(conn, pid).await?;
        }
        out.insert(g, pid);
    }
    Ok(out)
}

/// One encoded segment of a round.
struct Encoded {
    blob: Vec<u8>,
    hashes: Vec<u8>,
    count: i32,
}

/// zstd over several MiB is CPU work: kept off the async workers. A segment that came
/// ready (the client's compressed frames) is stored as it is.
async fn encode(work: Vec<(Vec<Frame>, Option<Vec<u8>>)>) -> ApiResult<Vec<Encoded>> {
    tokio::task::spawn_blocking(move || {
        work.into_iter()
            .map(|(f, ready)| {
                let blob = match ready {
                    Some(b) => b,
                    None => encode_segment(&f)?,
                };
                Ok(Encoded {
                    blob,
                    hashes: segment_hashes(&f),
                    count: f.len() as i32,
                })
            })
            .collect::<Result<Vec<_>, queen_log::frame::CodecError>>()
    })
    .await
    .map_err(|e| ApiError::Internal(format!("encoder task failed: {e}")))?
    .map_err(ApiError::from)
}

/// How a round reaches the database.
enum Via<'a> {
    /// The request's own connection (push fusion off).
    Alone(&'a Conn),
    /// Push fusion: alone when its lane is idle, else fused with concurrent rounds.
    Fused(&'a PushFusion),
    /// A connection of the caller's (a spool replay's transaction); with a widened
    /// dedup window, segment by segment.
    On(&'a Conn, Option<i32>),
}

impl Via<'_> {
    /// The connection lookups and dedup loads use (None: push fusion's lanes).
    fn conn(&self) -> Option<&Conn> {
        match self {
            Via::Alone(db) | Via::On(db, _) => Some(db),
            Via::Fused(_) => None,
        }
    }

    /// `windows`: the queues' own dedup windows by group, which a widened window
    /// (`On(_, Some(wide))`) only ever lengthens.
    async fn push(
        &self,
        segs: Vec<Segment>,
        live: &[usize],
        windows: &HashMap<usize, i32>,
    ) -> ApiResult<Vec<PushVerdict>> {
        match self {
            Via::Alone(db) | Via::On(db, None) => {
                Ok(db.log_push_multi(&segs.iter().collect::<Vec<_>>()).await?)
            }
            Via::Fused(f) => f.push(segs).await,
            Via::On(db, Some(wide)) => {
                let mut out = Vec::with_capacity(segs.len());
                for (seg, g) in segs.iter().zip(live) {
                    let window = windows.get(g).copied().unwrap_or(0).max(*wide);
                    out.push(db.log_push_one_windowed(seg, window).await?);
                }
                Ok(out)
            }
        }
    }
}

/// Pushes every group with pending items as one multi call and records the verdicts.
async fn push_round(
    via: &Via<'_>,
    tenant: Uuid,
    items: &mut [PushItem],
    groups: &mut [Group],
    outcomes: &mut [Outcome],
    (cache, cached, windows): (&DedupCache, &HashMap<usize, Uuid>, &HashMap<usize, i32>),
) -> ApiResult<()> {
    let live: Vec<usize> = (0..groups.len())
        .filter(|&g| !groups[g].pending.is_empty())
        .collect();
    let work: Vec<(Vec<Frame>, Option<Vec<u8>>)> = live
        .iter()
        .map(|&g| {
            let frames = groups[g]
                .pending
                .iter()
                .map(|&i| items[i].frame())
                .collect();
            (frames, groups[g].ready.take())
        })
        .collect();
    let encoded = encode(work).await?;
    let incoming: Vec<Vec<TxnHash>> = encoded
        .iter()
        .map(|e| split_hashes(&e.hashes).expect("16 bytes per frame"))
        .collect();
    // Each watermark names the partition and window it was computed for: the extension
    // trusts it for nothing else (a lookup remembered across a delete or a longer window).
    let verified: Vec<(i64, Option<(Uuid, i32)>)> = live
        .iter()
        .zip(&incoming)
        .map(|(g, hs)| {
            cached
                .get(g)
                .and_then(|pid| Some((cache.watermark(*pid, hs)?, (*pid, *windows.get(g)?))))
                .map_or((-1, None), |(w, f)| (w, Some(f)))
        })
        .collect();
    let segs = live
        .iter()
        .zip(encoded)
        .zip(verified)
        .map(|((&g, e), (verified, verified_for))| Segment {
            tenant,
            queue: groups[g].queue.clone(),
            partition: groups[g].partition.clone(),
            count: e.count,
            hashes: e.hashes,
            blob: e.blob,
            verified,
            verified_for,
        })
        .collect();
    let verdicts = via.push(segs, &live, windows).await?;
    for ((&g, verdict), hs) in live.iter().zip(verdicts).zip(incoming) {
        // Offsets of another partition (the name created again since the lookup) would
        // teach the cache about one that no longer exists.
        if let (
            Some(pid),
            PushVerdict::Queued {
                base_offset,
                partition_id,
                ..
            },
        ) = (cached.get(&g), &verdict)
        {
            if partition_id == pid {
                cache.record(*pid, *base_offset, hs);
            }
        }
        apply_verdict(&mut groups[g], verdict, items, outcomes)?;
    }
    Ok(())
}

/// Queued: every pending item gets its offset. Duplicate: the named frames are retired
/// as duplicates of the originals (whose ids the verdict carries) and the rest stays
/// pending for the next round.
fn apply_verdict(
    group: &mut Group,
    verdict: PushVerdict,
    items: &mut [PushItem],
    outcomes: &mut [Outcome],
) -> ApiResult<()> {
    match verdict {
        PushVerdict::Queued {
            base_offset,
            partition_id,
            ..
        } => {
            group.pid = Some(partition_id);
            for (k, &i) in group.pending.iter().enumerate() {
                outcomes[i] = Outcome {
                    queued: true,
                    buffered: false,
                    offset: Some(base_offset + k as i64),
                    original_off: None,
                    partition_id: None,
                };
            }
            group.pending.clear();
        }
        PushVerdict::Duplicate { dups, partition_id } => {
            group.pid = Some(partition_id);
            let mut gone = vec![false; group.pending.len()];
            for d in &dups {
                let i = *group.pending.get(d.i).ok_or_else(|| {
                    ApiError::Internal(format!("duplicate verdict names frame {}", d.i))
                })?;
                outcomes[i].original_off = Some(d.off);
                if let Some(id) = d.id {
                    items[i].message_id = id;
                }
                gone[d.i] = true;
            }
            if !gone.contains(&true) {
                return Err(ApiError::Internal(
                    "duplicate verdict names no frame".into(),
                ));
            }
            let mut k = 0;
            group.pending.retain(|_| {
                k += 1;
                !gone[k - 1]
            });
        }
    }
    Ok(())
}

/// Wakes the long-polls each queued partition can serve; counts pushed and duplicates.
fn wake_and_count(e: &Engine<'_>, tenant: Uuid, items: &[PushItem], outcomes: &[Outcome]) {
    let mut woken = std::collections::HashSet::new();
    let mut queued = 0u64;
    for (it, o) in items.iter().zip(outcomes).filter(|(_, o)| o.queued) {
        queued += 1;
        if woken.insert((it.queue.as_str(), it.partition.as_str())) {
            match o.partition_id {
                Some(pid) => e.signals.pushed(tenant, &it.queue, &it.partition, pid),
                None => e.signals.appended(tenant, &it.queue, Some(&it.partition)),
            }
        }
    }
    let buffered = outcomes.iter().filter(|o| o.buffered).count() as u64;
    e.signals.count(Counter::MessagesPushed, queued);
    // Buffered items are counted as pushed when their replay writes them.
    e.signals.count(
        Counter::MessagesDuplicate,
        items.len() as u64 - queued - buffered,
    );
}
