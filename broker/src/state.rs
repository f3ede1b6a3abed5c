//! Shared state of the running broker, every room put together for the handlers: the
//! configuration, the database client, the engine (registry, fusions, dedup cache), the
//! counters, the per-queue long-poll wake-ups, the ephemeral rings and their peers, and the
//! shutdown flag. Nothing here is
//! durable, and building it starts no loop but the fusion tasks (the server starts the
//! maintenance loop).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use uuid::Uuid;

use crate::config::Config;
use crate::db::Db;
use crate::engine::dedup::DedupCache;
use crate::engine::ephemeral::Store;
use crate::engine::fusion::Fusion;
use crate::engine::hints::Hints;
use crate::engine::lookups::LookupCache;
use crate::engine::push_fusion::PushFusion;
use crate::engine::registry::Registry;
use crate::engine::sealing::Sealer;
use crate::engine::spool::Spool;
use crate::engine::write_gate::WriteGate;
use crate::engine::{Counter, Engine, Signals};
use crate::keys::Keys;
use crate::ops::exposition::Sources;
use crate::ops::maintenance::MaintenanceStats;
use crate::ops::metrics::Metrics;
use crate::ops::shared_state::SharedModes;
use crate::ops::timers::TimerSweeper;
use crate::peers::Peers;

/// Cloned into every handler; cheap (one Arc).
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

/// What [`AppState`] points to.
pub struct Inner {
    pub config: Config,
    /// The database client (crate::db): every statement goes through it.
    pub db: Db,
    pub metrics: Metrics,
    pub registry: Registry,
    /// Payload encryption (QUEEN_ENCRYPTION_KEY).
    pub sealer: Sealer,
    /// The token keys when authentication is on (crate::keys).
    pub keys: Option<Arc<Keys>>,
    /// Push dedup watermarks (QUEEN_DEDUP_CACHE_MB).
    pub dedup: DedupCache,
    /// The push's lookup, remembered (QUEEN_LOOKUP_CACHE_MS).
    pub lookups: LookupCache,
    /// Present when `QUEEN_ACK_FUSION` is on (and the registry, which feeds it).
    pub fusion: Option<Fusion>,
    /// Present when `QUEEN_PUSH_FUSION` is on.
    pub push_fusion: Option<PushFusion>,
    /// What the maintenance loop did (crate::ops::maintenance; the server starts it).
    pub maintenance: Arc<MaintenanceStats>,
    /// The timer sweeper's counters and wake-up (crate::ops::timers; the server starts it).
    pub timers: Arc<TimerSweeper>,
    /// The rings of ephemeral queues this broker owns (crate::engine::ephemeral).
    pub ephemeral: Arc<Store>,
    /// The brokers that own the other ephemeral queues (`QUEEN_EPHEMERAL_PEERS`).
    pub peers: Peers,
    /// The push spool (`QUEEN_SPOOL_DIR`; crate::engine::spool), replayed by the task the
    /// server starts (crate::http::spool_replay).
    pub spool: Option<Arc<Spool>>,
    /// The maintenance modes shared by every broker (crate::ops::shared_state).
    pub modes: Arc<SharedModes>,
    /// What every append asks before it writes (crate::engine::write_gate).
    pub gate: Arc<WriteGate>,
    /// Long-poll wake-ups by (tenant, queue, partition); `None` = queue-level pops.
    wakers: Mutex<HashMap<WakerKey, Arc<Notify>>>,
    /// The partitions pushed to lately, which queue pops try first (crate::engine::hints).
    pub hints: Hints,
    /// Whose turn it is among the queues of a namespace pop (http/routes/pop.rs).
    pop_turn: std::sync::atomic::AtomicUsize,
    /// Becomes true once shutdown begins: parked long-polls answer 204 at once.
    stopping: tokio::sync::watch::Sender<bool>,
}

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

type WakerKey = (Uuid, String, Option<String>);

/// Past this many queues the waker map drops entries nobody waits on, so a stream of
/// one-off queue names cannot grow it without bound.
const WAKER_PRUNE_AT: usize = 4096;

/// The JWKS loop: a fetch at start, then one every `JWT_JWKS_REFRESH_INTERVAL`; it ends
/// with the runtime. A failed fetch keeps the known keys (crate::keys).
async fn refresh_jwks(keys: Arc<Keys>) {
    let Some(jwks) = keys.jwks() else { return };
    loop {
        let _ = jwks.fetch().await;
        tokio::time::sleep(jwks.refresh_interval()).await;
    }
}

impl AppState {
    /// Builds the state. Connections are opened lazily, so a broker can start before its
    /// database and report 503 until it is reachable. Must run inside a tokio runtime
    /// (the fusion shards are tasks).
    pub fn new(config: Config) -> Result<Self, String> {
        let db = Db::new(&config)?;
        let fusion = (config.ack_fusion && config.ack_registry).then(|| {
            Fusion::start_with(
                db.clone(),
                config.ack_fusion_shards,
                Duration::from_millis(config.ack_fusion_hold_ms),
                config.ack_fusion_max_inflight,
            )
        });
        let push_fusion = config.push_fusion.then(|| PushFusion::start(db.clone()));
        let keys = config
            .auth
            .as_ref()
            .map(Keys::new)
            .transpose()?
            .map(Arc::new);
        if let Some(k) = keys.clone().filter(|k| k.jwks().is_some()) {
            tokio::spawn(refresh_jwks(k));
        }
        let peers = Peers::new(&config);
        let spool = match &config.spool_dir {
            Some(dir) => Some(Arc::new(Spool::open(dir, config.spool_max_bytes)?)),
            None => None,
        };
        let modes: Arc<SharedModes> = Arc::default();
        let gate = Arc::new(WriteGate::new(modes.clone(), spool.clone()));
        let ephemeral = Arc::new(Store::new(
            config.ephemeral_max_bytes,
            config.ephemeral_max_queues,
        ));
        Ok(AppState(Arc::new(Inner {
            fusion,
            push_fusion,
            registry: Registry::new(&config),
            dedup: DedupCache::new(config.dedup_cache_mb),
            lookups: LookupCache::new(config.lookup_cache_ms),
            sealer: Sealer::new(config.encryption_key.as_ref()),
            keys,
            config,
            db,
            metrics: Metrics::default(),
            maintenance: Arc::default(),
            timers: Arc::default(),
            ephemeral,
            peers,
            spool,
            modes,
            gate,
            wakers: Mutex::new(HashMap::new()),
            hints: Hints::default(),
            pop_turn: std::sync::atomic::AtomicUsize::new(0),
            stopping: tokio::sync::watch::Sender::new(false),
        })))
    }

    /// What `/metrics` shows of this broker (crate::ops::exposition).
    pub fn metric_sources(&self) -> Sources<'_> {
        Sources {
            metrics: &self.metrics,
            registry_enabled: self.registry.enabled(),
            registry: self.registry.stats(),
            dedup: self.dedup.stats(),
            lookups: self.lookups.stats(),
            sealing: self.sealer.stats(),
            fusion: self.fusion.as_ref().map(Fusion::stats),
            push_fusion: self.push_fusion.as_ref().map(PushFusion::stats),
            maintenance: &self.maintenance,
            timers: &self.timers,
            ephemeral: &self.ephemeral,
            pool: self.db.pool().status(),
            spool: self.spool.as_deref(),
            modes: &self.modes,
        }
    }

    /// The next turn of the namespace pops: each request starts one queue further.
    pub fn next_pop_turn(&self) -> usize {
        self.pop_turn
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Shutdown has begun (http/server.rs): every parked long-poll answers 204 now instead
    /// of holding the drain for up to its timeout.
    pub fn begin_shutdown(&self) {
        self.stopping.send_replace(true);
    }

    /// Whether shutdown has begun.
    pub fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Resolves once shutdown has begun (at once if it already has).
    pub async fn stopping(&self) {
        let mut rx = self.stopping.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// The wake-up of long-polls parked on `queue` of `tenant`: a partition pop waits on
    /// its partition's, a queue-level pop (`partition` None) on the queue's. Keyed per
    /// tenant, so one tenant's pushes never wake (or time) another's long-polls; keyed per
    /// partition, so a push wakes only the pops that can be served by it instead of every
    /// consumer of the queue (measured: most re-polls of a per-partition consumer fleet
    /// came back empty before).
    pub fn waker(&self, tenant: Uuid, queue: &str, partition: Option<&str>) -> Arc<Notify> {
        let mut map = self.wakers.lock().expect("waker map poisoned");
        if map.len() > WAKER_PRUNE_AT {
            map.retain(|_, n| Arc::strong_count(n) > 1);
        }
        let key = (tenant, queue.to_string(), partition.map(str::to_string));
        map.entry(key).or_default().clone()
    }

    /// Long-polls parked now per (tenant, queue), for the sampled history
    /// (docs/observability.md): every holder of a waker but the map itself. Queues with
    /// none are left out.
    pub fn parked_by_queue(&self) -> Vec<(Uuid, String, usize)> {
        let map = self.wakers.lock().expect("waker map poisoned");
        let mut by: std::collections::BTreeMap<(Uuid, &str), usize> = Default::default();
        for ((tenant, queue, _), n) in map.iter() {
            let parked = Arc::strong_count(n) - 1;
            if parked > 0 {
                *by.entry((*tenant, queue.as_str())).or_default() += parked;
            }
        }
        by.into_iter()
            .map(|((t, q), n)| (t, q.to_string(), n))
            .collect()
    }

    /// Wakes the long-polls a push into `partition` of `queue` can serve: that
    /// partition's and the queue-level ones.
    pub fn wake(&self, tenant: Uuid, queue: &str, partition: &str) {
        self.0.appended(tenant, queue, Some(partition));
    }

    /// What the engine's writes use for one request (crate::engine::Engine).
    /// A queue of `tenant` was configured or deleted through this broker: what its pushes
    /// remembered of it is stale (engine/lookups.rs; another broker's change is bounded
    /// by `QUEEN_LOOKUP_CACHE_MS`).
    pub fn queue_changed(&self, tenant: Uuid, queue: &str) {
        self.lookups.forget_queue(tenant, queue);
    }

    pub fn engine(&self) -> Engine<'_> {
        Engine {
            db: &self.db,
            registry: &self.registry,
            fusion: self.fusion.as_ref(),
            push_fusion: self.push_fusion.as_ref(),
            dedup: &self.dedup,
            lookups: &self.lookups,
            sealer: &self.sealer,
            spool: self.spool.as_deref(),
            gate: &self.gate,
            tenancy: self.config.tenancy(),
            signals: &*self.0,
        }
    }

    /// Wakes every long-poll on `queue` of `tenant`, whatever its partition (for pushes
    /// whose partitions the caller does not track, e.g. a transaction's).
    pub fn wake_queue(&self, tenant: Uuid, queue: &str) {
        self.0.appended(tenant, queue, None);
    }
}

impl Inner {
    /// Wakes the long-polls an append to `queue` (to `partition`, or to partitions not
    /// tracked) can serve.
    fn wake_waiters(&self, tenant: Uuid, queue: &str, partition: Option<&str>) {
        let map = self.wakers.lock().expect("waker map poisoned");
        match partition {
            // The queue-level pops and those of this partition.
            Some(p) => {
                for k in [None, Some(p.to_string())] {
                    if let Some(n) = map.get(&(tenant, queue.to_string(), k)) {
                        n.notify_waiters();
                    }
                }
            }
            // Every long-poll on the queue, whatever its partition.
            None => map
                .iter()
                .filter(|((t, q, _), _)| *t == tenant && q == queue)
                .for_each(|(_, n)| n.notify_waiters()),
        }
    }
}

impl Signals for Inner {
    fn appended(&self, tenant: Uuid, queue: &str, partition: Option<&str>) {
        self.hints.unhinted(tenant, queue);
        self.wake_waiters(tenant, queue, partition);
    }

    fn pushed(&self, tenant: Uuid, queue: &str, partition: &str, pid: Uuid) {
        self.hints.pushed(tenant, queue, pid);
        self.wake_waiters(tenant, queue, Some(partition));
    }

    fn timer_scheduled(&self, delay_ms: i64) {
        self.timers.scheduled(delay_ms);
    }

    fn count(&self, counter: Counter, n: u64) {
        let m = &self.metrics;
        let c = match counter {
            Counter::AcksFast => &m.acks_fast,
            Counter::AcksSql => &m.acks_sql,
            Counter::DlqFiled => &m.dlq_filed,
            Counter::MessagesPushed => &m.messages_pushed,
            Counter::MessagesDuplicate => &m.messages_duplicate,
        };
        Metrics::add(c, n);
    }
}
