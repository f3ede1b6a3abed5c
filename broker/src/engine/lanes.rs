//! Fire-on-idle lanes: the adaptive batching that ack fusion (crate::engine::fusion) and push
//! fusion (crate::engine::push_fusion) share, so the rule lives in one place.
//!
//! - An item that finds its lane idle (nothing parked, nothing in flight on it) is not
//!   parked at all: the caller runs it alone, in its own task, with no hop and no flush
//!   slot (the unfused statement). A lone item costs exactly what it costs with fusion
//!   off; measured, the hop and the multi call had cost 3–12 % where nothing overlaps.
//! - An item arriving while its lane has one in flight parks. Each lane is one task with
//!   at most one flush in flight: it flushes everything parked at once; arrivals during
//!   a flush queue in the lane's channel and ride the next one, so the batch size emerges
//!   from load. Flushes of all lanes together are capped by a shared semaphore; a lane
//!   waiting for a slot keeps collecting. `hold` is only a liveness backstop tick while
//!   a lane waits for a slot, never a latency floor; an idle lane does not tick.
//! - Every parked item is answered with what the flush says about it, after the flush
//!   returned. [`Lanes::shutdown`] refuses later items (the caller runs them alone),
//!   flushes what is parked, lets in-flight flushes finish and answers every parked item.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

/// Why an item was not run by the lanes.
#[derive(Debug)]
pub enum Refused<T> {
    /// Shut down (or the lane stopped) before the item parked: it comes back untouched.
    Closed(T),
    /// The lane dropped the parked item unanswered (its task ended abnormally).
    Dropped,
}

/// The lanes and their tasks; see the module docs.
pub struct Lanes<T, A> {
    lanes: Vec<Lane<T, A>>,
    closing: AtomicBool,
    stop: watch::Sender<bool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// One lane as the callers see it: its channel and its load (items parked or in flight
/// on it, inline ones included).
struct Lane<T, A> {
    tx: mpsc::UnboundedSender<Job<T, A>>,
    load: Arc<AtomicUsize>,
}

struct Job<T, A> {
    item: T,
    reply: oneshot::Sender<A>,
    load: Load,
}

/// One item's share of its lane's load, released on drop (answered or abandoned, e.g. a
/// handler dropped mid-flight), so a lane can never stay busy for ever.
struct Load {
    load: Arc<AtomicUsize>,
    was_idle: bool,
}

impl Load {
    fn enter(load: &Arc<AtomicUsize>) -> Self {
        let was_idle = load.fetch_add(1, Ordering::AcqRel) == 0;
        Load {
            load: load.clone(),
            was_idle,
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.load.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<T: Send + 'static, A: Send + 'static> Lanes<T, A> {
    /// Starts `lanes` (at least 1) lane tasks on the current tokio runtime. `flush` runs
    /// a batch of parked items and answers each, in order; `max_inflight` (at least 1)
    /// flushes run at once across the lanes; `hold` (0 = 1 ms) is the backstop tick.
    pub fn start<F, Fut>(lanes: usize, max_inflight: usize, hold: Duration, flush: F) -> Self
    where
        F: Fn(Vec<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<A>> + Send + 'static,
    {
        let hold = hold.max(Duration::from_millis(1));
        let slots = Arc::new(Semaphore::new(max_inflight.max(1)));
        let flush = Arc::new(flush);
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let lanes = (0..lanes.max(1))
            .map(|_| {
                let (tx, rx) = mpsc::unbounded_channel();
                tasks.push(tokio::spawn(lane_loop(
                    rx,
                    flush.clone(),
                    slots.clone(),
                    hold,
                    stop_rx.clone(),
                )));
                Lane {
                    tx,
                    load: Arc::new(AtomicUsize::new(0)),
                }
            })
            .collect();
        Lanes {
            lanes,
            closing: AtomicBool::new(false),
            stop,
            tasks: Mutex::new(tasks),
        }
    }

    /// How many lanes there are.
    pub fn len(&self) -> usize {
        self.lanes.len()
    }

    /// Items parked or in flight on lane `lane` now (observability and tests).
    pub fn load(&self, lane: usize) -> usize {
        self.lanes[lane % self.lanes.len()]
            .load
            .load(Ordering::Acquire)
    }

    /// Whether there are no lanes (never: start makes at least one).
    pub fn is_empty(&self) -> bool {
        self.lanes.is_empty()
    }

    /// Runs `item` on lane `lane` (taken modulo the lane count): through `inline` when
    /// the lane is idle, else parked until a flush answers it. A parked caller holds
    /// nothing but the item's place in the lane.
    pub async fn run<I, IF>(&self, lane: usize, item: T, inline: I) -> Result<A, Refused<T>>
    where
        I: FnOnce(T) -> IF,
        IF: Future<Output = A>,
    {
        if self.closing.load(Ordering::Acquire) {
            return Err(Refused::Closed(item));
        }
        let lane = &self.lanes[lane % self.lanes.len()];
        // The guard keeps this item in the lane's load until it is answered.
        let load = Load::enter(&lane.load);
        if load.was_idle {
            let answer = inline(item).await;
            drop(load);
            return Ok(answer);
        }
        drop(inline);
        let (reply, rx) = oneshot::channel();
        if let Err(mpsc::error::SendError(job)) = lane.tx.send(Job { item, reply, load }) {
            return Err(Refused::Closed(job.item));
        }
        rx.await.map_err(|_| Refused::Dropped)
    }

    /// Graceful shutdown: later items are refused, every parked item is flushed and
    /// answered, in-flight flushes finish; returns when every lane task has ended.
    /// Idempotent.
    pub async fn shutdown(&self) {
        self.closing.store(true, Ordering::Release);
        let _ = self.stop.send(true);
        let tasks = std::mem::take(&mut *self.tasks.lock().expect("lane tasks poisoned"));
        for t in tasks {
            if let Err(e) = t.await {
                tracing::warn!("fusion lane ended abnormally: {e}");
            }
        }
    }
}

/// One lane: wait for an arrival, wait for a flush slot (arrivals meanwhile join the
/// batch), flush everything parked, repeat. The flush runs inline in this task: arrivals
/// during it queue in the channel and ride the next flush. On stop, what is parked or
/// queued is flushed before the task ends.
async fn lane_loop<T, A, F, Fut>(
    mut rx: mpsc::UnboundedReceiver<Job<T, A>>,
    flush: Arc<F>,
    slots: Arc<Semaphore>,
    hold: Duration,
    mut stop: watch::Receiver<bool>,
) where
    F: Fn(Vec<T>) -> Fut,
    Fut: Future<Output = Vec<A>>,
{
    let mut pending: Vec<Job<T, A>> = Vec::new();
    let mut stopping = *stop.borrow();
    let mut open = true;
    loop {
        drain(&mut rx, &mut pending);
        if pending.is_empty() {
            if stopping || !open {
                return;
            }
            tokio::select! {
                j = rx.recv() => match j {
                    Some(j) => pending.push(j),
                    None => open = false,
                },
                _ = stop.changed() => stopping = true,
            }
            continue;
        }
        let slot = acquire_slot(&slots, &mut rx, &mut pending, hold).await;
        drain(&mut rx, &mut pending);
        let (items, waiting): (Vec<T>, Vec<_>) = std::mem::take(&mut pending)
            .into_iter()
            .map(|j| (j.item, (j.reply, j.load)))
            .unzip();
        let n = items.len();
        let answers = flush(items).await;
        drop(slot);
        assert_eq!(answers.len(), n, "a flush answers every item it was given");
        for ((reply, load), a) in waiting.into_iter().zip(answers) {
            // Unloaded before the answer: the caller's next item may find the lane idle.
            drop(load);
            let _ = reply.send(a);
        }
    }
}

/// Everything already queued on the lane.
fn drain<J>(rx: &mut mpsc::UnboundedReceiver<J>, pending: &mut Vec<J>) {
    while let Ok(j) = rx.try_recv() {
        pending.push(j);
    }
}

/// A flush slot; while waiting for one, arrivals join `pending`. `hold` is the liveness
/// backstop: the wait is re-armed at least that often.
async fn acquire_slot<J>(
    slots: &Arc<Semaphore>,
    rx: &mut mpsc::UnboundedReceiver<J>,
    pending: &mut Vec<J>,
    hold: Duration,
) -> OwnedSemaphorePermit {
    loop {
        if let Ok(p) = slots.clone().try_acquire_owned() {
            return p;
        }
        tokio::select! {
            p = slots.clone().acquire_owned() => return p.expect("flush slots are never closed"),
            Some(j) = rx.recv() => pending.push(j),
            _ = tokio::time::sleep(hold) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lone item runs inline; items arriving while one is in flight park and are
    /// flushed together, each answered in order.
    #[tokio::test]
    async fn idle_runs_inline_overlapping_items_fold() {
        let flushed = Arc::new(Mutex::new(Vec::<Vec<u32>>::new()));
        let f = flushed.clone();
        let lanes: Lanes<u32, u32> = Lanes::start(1, 1, Duration::from_millis(1), move |xs| {
            f.lock().unwrap().push(xs.clone());
            async move { xs.iter().map(|x| x * 10).collect() }
        });
        let lanes = Arc::new(lanes);
        assert_eq!(
            lanes.run(0, 1, |x| async move { x + 100 }).await.unwrap(),
            101
        );
        // Hold the lane busy with an inline item until three more have parked.
        let (release, held) = oneshot::channel::<()>();
        let l = lanes.clone();
        let busy = tokio::spawn(async move {
            l.run(0, 2, |x| async move {
                held.await.unwrap();
                x + 100
            })
            .await
            .unwrap()
        });
        while lanes.lanes[0].load.load(Ordering::Acquire) == 0 {
            tokio::task::yield_now().await;
        }
        let parked: Vec<_> = (3..6)
            .map(|x| {
                let l = lanes.clone();
                tokio::spawn(async move { l.run(0, x, |_| async { unreachable!() }).await })
            })
            .collect();
        let mut answers = Vec::new();
        for p in parked {
            answers.push(p.await.unwrap().unwrap());
        }
        assert_eq!(answers, vec![30, 40, 50]);
        release.send(()).unwrap();
        assert_eq!(busy.await.unwrap(), 102);
        let flushed = flushed.lock().unwrap().clone();
        assert_eq!(flushed.concat(), vec![3, 4, 5], "{flushed:?}");
        assert!(flushed.len() <= 3);
        assert_eq!(lanes.lanes[0].load.load(Ordering::Acquire), 0);
    }

    #[tokio::test]
    async fn after_shutdown_items_come_back() {
        let lanes: Lanes<u32, u32> =
            Lanes::start(2, 1, Duration::from_millis(1), |xs| async move { xs });
        lanes.shutdown().await;
        match lanes.run(1, 7, |x| async move { x }).await {
            Err(Refused::Closed(7)) => {}
            other => panic!("{other:?}"),
        }
    }
}
