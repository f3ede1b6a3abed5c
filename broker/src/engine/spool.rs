//! The push spool (docs/availability.md): where a push goes when the database cannot be
//! reached, or while push maintenance mode is on. A spooled item is durable on this
//! machine before the push is answered `buffered`, and crate::http::spool_replay writes it
//! into its queue later, exactly once, in the order of acceptance per partition.
//!
//! On disk, in `QUEEN_SPOOL_DIR` (one broker per directory, held by an exclusive lock):
//! - `spool-<first seq>.log`: append-only files of records, each
//!   `[body length u32 LE][xxh3-64 of the body u64 LE][body]`; a new file past
//!   [`FILE_BYTES`]. Files whose records have all been replayed are deleted.
//! - `spool.id`: this spool's id, the key of its replay mark in the database
//!   (`queen.spool_mark_v1`), which the replay moves in the transaction of its push.
//! - `replayed`: the last replayed sequence number as this broker last knew it (a hint
//!   for a restart while the database is down; the database's mark is the authority).
//! - `highwater`: a sequence number no record of this spool has ever been given above
//!   (written durably, [`RESERVE`] ahead, before a number past it is used).
//! - `refused.jsonl`: records the database refused for good, and the bytes of spool files
//!   that could not be read at open (one JSON object a line).
//!
//! Appends are group-committed: one writer thread takes every append waiting, writes
//! them, `fdatasync`s once and answers them all.
//!
//! What the spool keeps after damage (docs/availability.md, "After damage"):
//! - Sequence numbers never restart below one already given or replayed: a start
//!   continues above the highest of every file's records (and names), the `replayed`
//!   hint and `highwater`. The database's mark is checked at the replay's first read: a
//!   mark at or above this start's first number means the directory lost its history
//!   (files and `highwater` gone, `spool.id` kept), and the spool takes a new id, so the
//!   records of this start are replayed under a mark of their own ([`Spool::adopt_mark`]).
//! - A record that does not check costs that record only: the scan at open goes on at the
//!   next offset where a record checks (length, checksum, parse, ascending number); the
//!   unreadable bytes go to `refused.jsonl` (base64, with the reason), are counted
//!   (`damaged` in the middle of a file, `torn` at its end) and logged, and the file is
//!   rewritten without them.

use std::collections::{HashMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::{oneshot, Notify};
use uuid::Uuid;
use xxhash_rust::xxh3::xxh3_64;

/// A spool file is closed and a new one begun past this size.
pub const FILE_BYTES: u64 = 64 * 1024 * 1024;
/// Bytes of a record's frame before its body.
const HEADER: usize = 12;
/// The largest body a record may have (a push item is at most the body limit).
const MAX_BODY: usize = 1 << 30;
/// The smallest body a record can have: its fixed fields and four empty lengths.
const MIN_BODY: usize = 8 + 8 + 1 + 16 + 16 + 4 * 4;
/// How far ahead of the numbers in use `highwater` is written: one durable write per
/// this many records, and at most this many numbers skipped by a restart.
pub const RESERVE: u64 = 4096;

/// One spooled push item: what the replay needs to push it as the broker would have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Assigned at append, ascending; 0 until then.
    pub seq: u64,
    pub tenant: Uuid,
    pub queue: String,
    pub partition: String,
    pub txn: String,
    pub message_id: Uuid,
    pub trace: Option<[u8; 16]>,
    /// The payload is sealed already (its queue encrypts).
    pub encrypted: bool,
    /// The push was sent to the database and the connection ended before its answer: it
    /// may be in the queue already, so its replay looks for it first.
    pub maybe_written: bool,
    pub spooled_at_ms: u64,
    pub payload: Vec<u8>,
    /// The producer subject the push stamped (the token's `sub`), kept so the replay
    /// stores it too (flag 8; a record without it reads as before).
    pub producer_sub: Option<String>,
}

impl Record {
    /// The record's frame on disk.
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(96 + self.payload.len() + self.txn.len());
        b.extend_from_slice(&self.seq.to_le_bytes());
        b.extend_from_slice(&self.spooled_at_ms.to_le_bytes());
        let flags = u8::from(self.encrypted)
            | u8::from(self.maybe_written) << 1
            | u8::from(self.trace.is_some()) << 2
            | u8::from(self.producer_sub.is_some()) << 3;
        b.push(flags);
        b.extend_from_slice(self.tenant.as_bytes());
        b.extend_from_slice(self.message_id.as_bytes());
        if let Some(t) = &self.trace {
            b.extend_from_slice(t);
        }
        for s in [&self.queue, &self.partition, &self.txn]
            .into_iter()
            .chain(self.producer_sub.as_ref())
        {
            b.extend_from_slice(&(s.len() as u32).to_le_bytes());
            b.extend_from_slice(s.as_bytes());
        }
        b.extend_from_slice(&(self.payload.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.payload);
        let mut frame = Vec::with_capacity(HEADER + b.len());
        frame.extend_from_slice(&(b.len() as u32).to_le_bytes());
        frame.extend_from_slice(&xxh3_64(&b).to_le_bytes());
        frame.extend_from_slice(&b);
        frame
    }

    /// A body that checked; None when it does not parse (damage the checksum missed).
    fn decode(b: &[u8]) -> Option<Record> {
        let mut r = Cursor { b, at: 0 };
        let seq = u64::from_le_bytes(r.take(8)?.try_into().ok()?);
        let spooled_at_ms = u64::from_le_bytes(r.take(8)?.try_into().ok()?);
        let flags = r.take(1)?[0];
        let tenant = Uuid::from_slice(r.take(16)?).ok()?;
        let message_id = Uuid::from_slice(r.take(16)?).ok()?;
        let trace = if flags & 4 != 0 {
            Some(r.take(16)?.try_into().ok()?)
        } else {
            None
        };
        let queue = r.string()?;
        let partition = r.string()?;
        let txn = r.string()?;
        let producer_sub = if flags & 8 != 0 {
            Some(r.string()?)
        } else {
            None
        };
        let payload = r.bytes()?.to_vec();
        (r.at == b.len()).then_some(Record {
            seq,
            tenant,
            queue,
            partition,
            txn,
            message_id,
            trace,
            encrypted: flags & 1 != 0,
            maybe_written: flags & 2 != 0,
            spooled_at_ms,
            payload,
            producer_sub,
        })
    }
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = u32::from_le_bytes(self.take(4)?.try_into().ok()?) as usize;
        self.take(n)
    }
    fn string(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?.to_vec()).ok()
    }
}

/// Why an append was not made durable (the push is answered 503, nothing promised).
#[derive(Debug)]
pub enum AppendError {
    /// `QUEEN_SPOOL_MAX_BYTES` would be exceeded.
    Full { pending: u64, max: u64 },
    /// The disk said no (the error's text).
    Io(String),
}

impl std::fmt::Display for AppendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppendError::Full { pending, max } => write!(
                f,
                "push spool full ({pending} of {max} bytes, QUEEN_SPOOL_MAX_BYTES); retry later"
            ),
            AppendError::Io(e) => write!(f, "push spool write failed: {e}; nothing was buffered"),
        }
    }
}

/// A spool file and what is known of it.
struct SpoolFile {
    path: PathBuf,
    first_seq: u64,
    last_seq: u64,
    /// Bytes durable (fsynced) in it: what a reader may read.
    len: u64,
}

/// Where the replay reads next.
#[derive(Default)]
struct ReadAt {
    file_first_seq: u64,
    offset: u64,
}

/// Records read for one replay step, and where the next step reads.
pub struct Batch {
    pub records: Vec<Record>,
    /// Their charge against `QUEEN_SPOOL_MAX_BYTES`.
    charged: u64,
    /// (file, offset) after the last record read.
    resume: Option<(u64, u64)>,
}

impl Batch {
    /// The records `keep` selects, with their charge (a batch split by the replay when
    /// a record is refused). Advancing past a part leaves the read position where it
    /// was: the next read skips what is replayed and loses nothing.
    pub fn only(&self, keep: impl Fn(&Record) -> bool) -> Batch {
        let records: Vec<Record> = self.records.iter().filter(|r| keep(r)).cloned().collect();
        Batch {
            charged: records.iter().map(charge).sum(),
            records,
            resume: None,
        }
    }
}

/// (tenant, queue, partition)
pub type PartitionKey = (Uuid, String, String);

/// The spool's state, under one lock.
struct State {
    files: VecDeque<SpoolFile>,
    next_seq: u64,
    /// `next_seq` at open: every record below it is from an earlier life of the spool.
    born: u64,
    /// The database's mark has been checked against `born` ([`Spool::adopt_mark`]).
    mark_checked: bool,
    /// Every record up to here is in its queue (or refused).
    replayed: u64,
    pending_records: u64,
    pending_bytes: u64,
    /// The newest spooled seq per partition not yet replayed: a push to one of them goes
    /// to the spool too, behind its predecessors (per-partition order).
    partitions: HashMap<PartitionKey, u64>,
    read_at: ReadAt,
    oldest_pending_ms: Option<u64>,
    /// When the oldest pending record that may have been written before it was spooled
    /// was spooled (kept until the spool drains): the sidecar purge hold's instant.
    maybe_written_since: Option<u64>,
}

/// Counters for `/metrics` and `/api/v1/status/buffers`.
#[derive(Default)]
pub struct SpoolCounters {
    pub spooled_records: AtomicU64,
    pub spooled_bytes: AtomicU64,
    pub replayed_records: AtomicU64,
    pub replayed_bytes: AtomicU64,
    pub refused_records: AtomicU64,
    pub deduplicated_records: AtomicU64,
    pub torn_cuts: AtomicU64,
    /// Unreadable regions in the middle of a spool file, skipped at open (the records
    /// after them were kept).
    pub damaged: AtomicU64,
    pub full_refusals: AtomicU64,
    pub write_failures: AtomicU64,
    pub fsyncs: AtomicU64,
}

/// What `/api/v1/status/buffers` and `/metrics` show.
pub struct SpoolStats {
    pub id: Uuid,
    pub pending_records: u64,
    pub pending_bytes: u64,
    pub max_bytes: u64,
    pub oldest_pending_age_ms: Option<u64>,
    pub files: usize,
    pub replayed_through: u64,
}

type Reply = oneshot::Sender<Result<(), AppendError>>;

/// The spool; see the module docs.
pub struct Spool {
    dir: PathBuf,
    /// Changes only when the directory lost its history ([`Spool::adopt_mark`]).
    id: Mutex<Uuid>,
    max_bytes: u64,
    state: Arc<Mutex<State>>,
    writer: mpsc::Sender<(Vec<Record>, Reply)>,
    /// Signalled when records are appended (the replay waits on it).
    pub appended: Arc<Notify>,
    /// Signalled when the replay moved past records (pushes waiting to go direct).
    advanced: Notify,
    pub counters: Arc<SpoolCounters>,
    /// The database failed a push as unreachable and nothing has been replayed since:
    /// pushes go to the spool at once instead of waiting for a connection first.
    db_down: AtomicBool,
    _lock: File,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn io(what: &str, path: &Path, e: std::io::Error) -> String {
    format!("{what} {}: {e}", path.display())
}

impl Spool {
    /// Opens (or creates) the spool in `dir`: takes the directory's lock, reads its id,
    /// scans its files (cutting a torn tail) and starts the writer thread.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Self, String> {
        fs::create_dir_all(dir).map_err(|e| io("QUEEN_SPOOL_DIR: cannot create", dir, e))?;
        let lock = lock_dir(dir)?;
        let id = read_or_make_id(dir)?;
        let counters = Arc::new(SpoolCounters::default());
        let hint = read_number(dir, "replayed");
        let highwater = read_number(dir, "highwater");
        let mut state = scan(dir, &counters)?;
        // Never below a number given or replayed before (the module docs).
        state.next_seq = state.next_seq.max(hint + 1).max(highwater + 1);
        state.born = state.next_seq;
        state.replayed = hint;
        recount(&mut state)?;
        let state = Arc::new(Mutex::new(state));
        let (tx, rx) = mpsc::channel::<(Vec<Record>, Reply)>();
        let appended = Arc::new(Notify::new());
        let w = Writer {
            dir: dir.to_path_buf(),
            state: state.clone(),
            counters: counters.clone(),
            appended: appended.clone(),
            file: None,
            reserved: state.lock().expect("spool state").next_seq - 1,
        };
        std::thread::Builder::new()
            .name("queen-spool-writer".into())
            .spawn(move || w.run(rx))
            .map_err(|e| format!("spool writer thread: {e}"))?;
        let spool = Spool {
            dir: dir.to_path_buf(),
            id: Mutex::new(id),
            max_bytes,
            state,
            writer: tx,
            appended,
            advanced: Notify::new(),
            counters,
            db_down: AtomicBool::new(false),
            _lock: lock,
        };
        let s = spool.stats();
        if s.pending_records > 0 {
            tracing::warn!(
                spool = %s.id,
                records = s.pending_records,
                bytes = s.pending_bytes,
                "push spool holds records from before this start; replaying them when the database answers"
            );
        }
        Ok(spool)
    }

    pub fn id(&self) -> Uuid {
        *self.id.lock().expect("spool id")
    }

    /// Whether a push to these partitions must go to the spool: the database is known
    /// down, or one of them has spooled records not yet replayed.
    pub fn must_take<'a>(&self, keys: impl Iterator<Item = (Uuid, &'a str, &'a str)>) -> bool {
        self.db_down.load(Ordering::Relaxed) || self.ahead(keys)
    }

    /// Waits (at most `bound`) until none of these partitions has spooled records ahead
    /// of a push, so the push can be written directly behind them: under steady load a
    /// spool that took every push to a partition with records pending would never empty
    /// (each replay batch would only catch up with what arrived meanwhile). False when
    /// the bound passed, or the database is known down again.
    pub async fn wait_clear(
        &self,
        keys: &[(Uuid, &str, &str)],
        bound: std::time::Duration,
    ) -> bool {
        self.wait_clear_where(|| self.ahead(keys.iter().copied()), bound)
            .await
    }

    /// [`Spool::wait_clear`] for the partitions `covers` accepts (a write whose
    /// partitions the database picks: crate::engine::write_gate).
    pub async fn wait_clear_of(
        &self,
        covers: impl Fn(&PartitionKey) -> bool,
        bound: std::time::Duration,
    ) -> bool {
        self.wait_clear_where(|| self.pending_where(&covers), bound)
            .await
    }

    async fn wait_clear_where(&self, ahead: impl Fn() -> bool, bound: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let advanced = self.advanced.notified();
            tokio::pin!(advanced);
            advanced.as_mut().enable();
            if self.db_down.load(Ordering::Relaxed) {
                return false;
            }
            if !ahead() {
                return true;
            }
            if tokio::time::timeout_at(deadline, advanced).await.is_err() {
                return false;
            }
        }
    }

    /// Whether one of these partitions has spooled records not yet replayed.
    fn ahead<'a>(&self, mut keys: impl Iterator<Item = (Uuid, &'a str, &'a str)>) -> bool {
        let st = self.state.lock().expect("spool state");
        if st.partitions.is_empty() {
            return false;
        }
        keys.any(|(t, q, p)| {
            st.partitions
                .contains_key(&(t, q.to_string(), p.to_string()))
        })
    }

    /// Whether a partition `covers` accepts has spooled records not yet replayed.
    pub fn pending_where(&self, covers: impl Fn(&PartitionKey) -> bool) -> bool {
        let st = self.state.lock().expect("spool state");
        st.partitions.keys().any(covers)
    }

    /// A push found the database unreachable.
    pub fn mark_db_down(&self) {
        self.advanced.notify_waiters();
        if !self.db_down.swap(true, Ordering::Relaxed) {
            tracing::warn!(spool = %self.id(), "database unreachable: pushes go to the push spool");
        }
    }

    /// The replay reached the database again.
    pub fn mark_db_up(&self) {
        if self.db_down.swap(false, Ordering::Relaxed) {
            tracing::info!(spool = %self.id(), "database reachable again: replaying the push spool");
        }
    }

    pub fn db_down(&self) -> bool {
        self.db_down.load(Ordering::Relaxed)
    }

    /// Appends `records` durably (fsynced, group-committed with concurrent appends) and
    /// assigns their sequence numbers in order.
    pub async fn append(&self, mut records: Vec<Record>) -> Result<(), AppendError> {
        let bytes: u64 = records.iter().map(charge).sum();
        {
            let st = self.state.lock().expect("spool state");
            if st.pending_bytes + bytes > self.max_bytes {
                self.counters.full_refusals.fetch_add(1, Ordering::Relaxed);
                return Err(AppendError::Full {
                    pending: st.pending_bytes,
                    max: self.max_bytes,
                });
            }
        }
        let now = now_ms();
        for r in records.iter_mut() {
            r.spooled_at_ms = now;
        }
        let (tx, rx) = oneshot::channel();
        self.writer
            .send((records, tx))
            .map_err(|_| AppendError::Io("the spool writer has stopped".into()))?;
        rx.await
            .unwrap_or_else(|_| Err(AppendError::Io("the spool writer has stopped".into())))
    }

    /// Records pending replay, beginning at the replay position: at most `max` records
    /// and about `max_bytes` payload bytes (at least one). Blocking file reads. The
    /// position moves only when the batch is [`Spool::advance`]d past.
    pub fn read_batch(&self, max: usize, max_bytes: usize) -> Result<Batch, String> {
        let (files, replayed, at) = {
            let st = self.state.lock().expect("spool state");
            let files: Vec<(PathBuf, u64, u64)> = st
                .files
                .iter()
                .map(|f| (f.path.clone(), f.first_seq, f.len))
                .collect();
            (
                files,
                st.replayed,
                (st.read_at.file_first_seq, st.read_at.offset),
            )
        };
        let mut batch = Batch {
            records: Vec::new(),
            charged: 0,
            resume: None,
        };
        let mut bytes = 0usize;
        let full = |b: &Batch, bytes: usize| b.records.len() >= max || bytes >= max_bytes;
        for (path, first, len) in files.into_iter().filter(|f| f.1 >= at.0) {
            let start = if first == at.0 { at.1 } else { 0 };
            if start >= len {
                continue;
            }
            let mut f = File::open(&path).map_err(|e| io("spool: cannot open", &path, e))?;
            f.seek(SeekFrom::Start(start))
                .map_err(|e| io("spool: cannot seek", &path, e))?;
            let mut r = BufReader::new(f.take(len - start));
            let mut off = start;
            while let Some((rec, n)) = read_record(&mut r).map_err(|e| io("spool", &path, e))? {
                off += n as u64;
                batch.resume = Some((first, off));
                if rec.seq <= replayed {
                    continue;
                }
                bytes += rec.payload.len();
                batch.charged += charge(&rec);
                batch.records.push(rec);
                if full(&batch, bytes) {
                    break;
                }
            }
            if full(&batch, bytes) {
                break;
            }
        }
        if let Some(first) = batch.records.first() {
            self.state.lock().expect("spool state").oldest_pending_ms = Some(first.spooled_at_ms);
        }
        Ok(batch)
    }

    /// The replay committed `batch` (or refused what it did not commit): forget its
    /// records, move the read position past them, delete the files wholly behind, save
    /// the hint.
    pub fn advance(&self, batch: &Batch) {
        let Some(last) = batch.records.last() else {
            return;
        };
        self.advance_to(
            last.seq,
            batch.records.len() as u64,
            batch.charged,
            batch.resume,
        );
    }

    fn advance_to(&self, seq: u64, records: u64, bytes: u64, resume: Option<(u64, u64)>) {
        let mut st = self.state.lock().expect("spool state");
        if seq <= st.replayed {
            return;
        }
        st.replayed = seq;
        if let Some((file_first_seq, offset)) = resume {
            st.read_at = ReadAt {
                file_first_seq,
                offset,
            };
        }
        st.pending_records = st.pending_records.saturating_sub(records);
        st.pending_bytes = st.pending_bytes.saturating_sub(bytes);
        st.partitions.retain(|_, last| *last > seq);
        if st.pending_records == 0 {
            st.oldest_pending_ms = None;
            st.maybe_written_since = None;
            st.partitions.clear();
        }
        // Keep the newest file (the writer's); delete the ones wholly replayed.
        while st.files.len() > 1 && st.files[0].last_seq <= seq {
            let f = st.files.pop_front().expect("a file");
            if let Err(e) = fs::remove_file(&f.path) {
                tracing::warn!("spool: cannot delete {}: {e}", f.path.display());
            }
        }
        drop(st);
        self.advanced.notify_waiters();
        let tmp = self.dir.join("replayed.tmp");
        if fs::write(&tmp, seq.to_string()).is_ok() {
            let _ = fs::rename(&tmp, self.dir.join("replayed"));
        }
    }

    /// Moves the replay position past `mark` (the database's replay mark, read when the
    /// replay reaches the database): records up to it are in their queues already.
    /// Blocking file reads.
    pub fn skip_through(&self, mark: u64) -> Result<(), String> {
        let behind = {
            let st = self.state.lock().expect("spool state");
            mark > st.replayed
        };
        if !behind {
            return Ok(());
        }
        let (files, replayed) = {
            let st = self.state.lock().expect("spool state");
            let files: Vec<(PathBuf, u64, u64)> = st
                .files
                .iter()
                .filter(|f| f.first_seq <= mark)
                .map(|f| (f.path.clone(), f.first_seq, f.len))
                .collect();
            (files, st.replayed)
        };
        let (n, bytes) = count_through(&files, replayed, mark)?;
        self.advance_to(mark, n, bytes, None);
        Ok(())
    }

    /// The database's replay mark as the replay reads it: moves the replay position past
    /// it, as [`Spool::skip_through`]. The first read of this life checks it against the
    /// numbers of this start: a mark at or above them cannot be of their records (none was
    /// replayed yet), so the directory lost its history (its files and `highwater`, not its
    /// `spool.id`). The records from before this start are behind that mark (skipped);
    /// those of this start would be skipped too, so the spool takes a new id (a mark of
    /// its own, at 0). Returns the id left behind then (its purge hold is the caller's to
    /// release).
    pub fn adopt_mark(&self, mark: u64) -> Result<Option<Uuid>, String> {
        let (checked, born) = {
            let st = self.state.lock().expect("spool state");
            (st.mark_checked, st.born)
        };
        if checked || mark < born {
            self.skip_through(mark)?;
            self.state.lock().expect("spool state").mark_checked = true;
            return Ok(None);
        }
        self.skip_through(born - 1)?;
        let old = self.id();
        let new = make_id(&self.dir)?;
        *self.id.lock().expect("spool id") = new;
        self.state.lock().expect("spool state").mark_checked = true;
        tracing::error!(
            old_spool = %old,
            spool = %new,
            mark,
            first_seq_of_this_start = born,
            "push spool: the database's replay mark is at or above this start's records, so \
             this directory lost its history (spool files and highwater gone, spool.id kept); \
             continuing under a new spool id so that no record of this start is skipped"
        );
        Ok(Some(old))
    }

    /// A record the database refused for good: to `refused.jsonl`, with why.
    pub fn refuse(&self, rec: &Record, why: &str) {
        self.counters
            .refused_records
            .fetch_add(1, Ordering::Relaxed);
        let line = serde_json::json!({
            "seq": rec.seq,
            "tenant": rec.tenant,
            "queue": rec.queue,
            "partition": rec.partition,
            "transactionId": rec.txn,
            "messageId": rec.message_id,
            "spooledAtMs": rec.spooled_at_ms,
            "encrypted": rec.encrypted,
            "payload": String::from_utf8_lossy(&rec.payload),
            "error": why,
        });
        if let Err(e) = file_refused(&self.dir, &line) {
            tracing::error!("spool: {e}");
        }
        tracing::warn!(
            queue = %rec.queue,
            partition = %rec.partition,
            seq = rec.seq,
            "spooled push refused by the database, moved to refused.jsonl: {why}"
        );
    }

    /// Counts the pending records again from the files and reads from the first again:
    /// the replay's way out when the counts say records are pending and none can be read
    /// (logged: it would be a bug of the accounting).
    pub fn resync(&self) -> Result<(), String> {
        let mut st = self.state.lock().expect("spool state");
        st.read_at = ReadAt::default();
        recount(&mut st)
    }

    /// When the oldest pending record that may already be in its queue was spooled
    /// (unix ms): while there is one, the replay holds the sidecar purge back to it.
    pub fn maybe_written_since(&self) -> Option<u64> {
        self.state.lock().expect("spool state").maybe_written_since
    }

    pub fn has_pending(&self) -> bool {
        self.state.lock().expect("spool state").pending_records > 0
    }

    pub fn stats(&self) -> SpoolStats {
        let st = self.state.lock().expect("spool state");
        SpoolStats {
            id: self.id(),
            pending_records: st.pending_records,
            pending_bytes: st.pending_bytes,
            max_bytes: self.max_bytes,
            oldest_pending_age_ms: st.oldest_pending_ms.map(|t| now_ms().saturating_sub(t)),
            files: st.files.len(),
            replayed_through: st.replayed,
        }
    }
}

/// Records and bytes of `files` (path, first seq, length) after `replayed` up to `mark`.
fn count_through(
    files: &[(PathBuf, u64, u64)],
    replayed: u64,
    mark: u64,
) -> Result<(u64, u64), String> {
    let mut n = 0;
    let mut bytes = 0;
    for (path, _, len) in files {
        each_record(path, *len, |r, size| {
            if r.seq > replayed && r.seq <= mark {
                n += 1;
                bytes += size;
            }
        })?;
    }
    Ok((n, bytes))
}

/// The bytes a pending record counts for against `QUEEN_SPOOL_MAX_BYTES` (its payload
/// and a fixed allowance for the rest, as [`Spool::append`] charges it).
fn charge(r: &Record) -> u64 {
    r.payload.len() as u64 + 128
}

/// One record from `r`: None at a clean end; an error for a record that does not check.
fn read_record(r: &mut impl Read) -> std::io::Result<Option<(Record, usize)>> {
    let mut head = [0u8; HEADER];
    match r.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes")) as usize;
    let sum = u64::from_le_bytes(head[4..12].try_into().expect("8 bytes"));
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    if len == 0 || len > MAX_BODY {
        return Err(bad("record length out of range"));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    if xxh3_64(&body) != sum {
        return Err(bad("record checksum mismatch"));
    }
    let rec = Record::decode(&body).ok_or_else(|| bad("record does not parse"))?;
    Ok(Some((rec, HEADER + len)))
}

/// Every record of a file's first `len` bytes, with its charge.
fn each_record(path: &Path, len: u64, mut f: impl FnMut(&Record, u64)) -> Result<(), String> {
    let file = File::open(path).map_err(|e| io("spool: cannot open", path, e))?;
    let mut r = BufReader::new(file.take(len));
    while let Some((rec, _)) = read_record(&mut r).map_err(|e| io("spool", path, e))? {
        f(&rec, charge(&rec));
    }
    Ok(())
}

/// Appends `line` to the spool's `refused.jsonl`, synced: the one place that file is
/// written (records the database refused, bytes that could not be read).
fn file_refused(dir: &Path, line: &serde_json::Value) -> Result<(), String> {
    let path = dir.join("refused.jsonl");
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| {
            writeln!(f, "{line}")?;
            f.sync_data()
        })
        .map_err(|e| io("cannot write", &path, e))
}

/// A number kept in a file of the spool directory (`replayed`, `highwater`); 0 when
/// absent or unreadable (logged: the other sources of the floor still hold).
fn read_number(dir: &Path, name: &str) -> u64 {
    let path = dir.join(name);
    match fs::read_to_string(&path) {
        Ok(s) => s.trim().parse().unwrap_or_else(|_| {
            tracing::warn!("spool: {} does not hold a number; ignored", path.display());
            0
        }),
        Err(_) => 0,
    }
}

/// Replaces `dir/name` with `bytes`, durably (a temporary file synced, renamed, the
/// directory synced).
fn write_durably(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), String> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    fs::write(&tmp, bytes)
        .and_then(|_| File::open(&tmp)?.sync_all())
        .and_then(|_| fs::rename(&tmp, &path))
        .and_then(|_| File::open(dir)?.sync_all())
        .map_err(|e| io("spool: cannot write", &path, e))
}

/// The record framed at `at` in `b`, whose number must be above `prev`, and its frame's
/// length; or why it does not check. The cheap checks come first: the scan past damage
/// tries every offset.
fn frame_at(b: &[u8], at: usize, prev: u64) -> Result<(Record, usize), &'static str> {
    let rest = &b[at..];
    if rest.len() < HEADER {
        return Err("the file ends inside a record header (a torn write)");
    }
    let len = u32::from_le_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
    let sum = u64::from_le_bytes(rest[4..12].try_into().expect("8 bytes"));
    if !(MIN_BODY..=MAX_BODY).contains(&len) {
        return Err("record length out of range");
    }
    let Some(body) = rest.get(HEADER..HEADER + len) else {
        return Err("the file ends inside a record (a torn write)");
    };
    let seq = u64::from_le_bytes(body[0..8].try_into().expect("8 bytes"));
    if seq <= prev {
        return Err("record number not above the one before it");
    }
    if xxh3_64(body) != sum {
        return Err("record checksum mismatch");
    }
    let rec = Record::decode(body).ok_or("record does not parse")?;
    Ok((rec, HEADER + len))
}

/// What a spool file holds: the frames that check (offset, length) with the last
/// record's number, and the regions that do not (offset, length, why), in file order.
#[derive(Default)]
struct Scanned {
    frames: Vec<(usize, usize)>,
    last: u64,
    bad: Vec<(usize, usize, &'static str)>,
}

/// Reads a spool file's bytes: past a record that does not check, on at the next offset
/// where one does (docs/availability.md, "After damage").
fn scan_bytes(b: &[u8], first_seq: u64) -> Scanned {
    let mut out = Scanned::default();
    let mut prev = first_seq.saturating_sub(1);
    let mut at = 0;
    while at < b.len() {
        match frame_at(b, at, prev) {
            Ok((rec, n)) => {
                out.frames.push((at, n));
                prev = rec.seq;
                out.last = rec.seq;
                at += n;
            }
            Err(why) => {
                let end = (at + 1..b.len())
                    .find(|&p| frame_at(b, p, prev).is_ok())
                    .unwrap_or(b.len());
                out.bad.push((at, end - at, why));
                at = end;
            }
        }
    }
    out
}

/// The spool files of `dir`, oldest first, each with its records that check: what does
/// not check is filed in `refused.jsonl`, counted, logged, and the file rewritten
/// without it. `next_seq` is above every record and every file's name.
fn scan(dir: &Path, counters: &SpoolCounters) -> Result<State, String> {
    use base64::Engine;
    let mut names: Vec<(u64, PathBuf)> = fs::read_dir(dir)
        .map_err(|e| io("spool: cannot list", dir, e))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let seq = name
                .strip_prefix("spool-")?
                .strip_suffix(".log")?
                .parse()
                .ok()?;
            Some((seq, e.path()))
        })
        .collect();
    names.sort();
    let mut files = VecDeque::new();
    let mut next_seq = 1;
    for (first, path) in names {
        // A file is named after the first number it was opened for (given or not).
        next_seq = next_seq.max(first);
        let bytes = fs::read(&path).map_err(|e| io("spool: cannot read", &path, e))?;
        let found = scan_bytes(&bytes, first);
        for &(at, n, why) in &found.bad {
            let tail = at + n == bytes.len();
            let (kind, counter) = if tail {
                ("torn", &counters.torn_cuts)
            } else {
                ("damaged", &counters.damaged)
            };
            counter.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                file = %path.display(),
                offset = at,
                bytes = n,
                kind,
                "spool: bytes that do not read as a record ({why}); filed in refused.jsonl, \
                 the records after them kept"
            );
            file_refused(
                dir,
                &serde_json::json!({
                    "kind": kind,
                    "file": path.file_name().map(|f| f.to_string_lossy().into_owned()),
                    "offset": at,
                    "length": n,
                    "bytes": base64::engine::general_purpose::STANDARD.encode(&bytes[at..at + n]),
                    "error": why,
                }),
            )?;
        }
        let len: usize = found.frames.iter().map(|f| f.1).sum();
        if !found.bad.is_empty() && len > 0 {
            let mut kept = Vec::with_capacity(len);
            for &(at, n) in &found.frames {
                kept.extend_from_slice(&bytes[at..at + n]);
            }
            let name = path.file_name().expect("a file name").to_string_lossy();
            write_durably(dir, &name, &kept)?;
        }
        if len == 0 {
            let _ = fs::remove_file(&path);
            continue;
        }
        next_seq = next_seq.max(found.last + 1);
        files.push_back(SpoolFile {
            path,
            first_seq: first,
            last_seq: found.last,
            len: len as u64,
        });
    }
    Ok(State {
        files,
        next_seq,
        born: next_seq,
        mark_checked: false,
        replayed: 0,
        pending_records: 0,
        pending_bytes: 0,
        partitions: HashMap::new(),
        read_at: ReadAt::default(),
        oldest_pending_ms: None,
        maybe_written_since: None,
    })
}

/// The pending counts and partitions of the records after `st.replayed`.
fn recount(st: &mut State) -> Result<(), String> {
    let mut n = 0;
    let mut bytes = 0;
    let mut parts = HashMap::new();
    let mut oldest = None;
    let mut maybe: Option<u64> = None;
    for f in st.files.iter().filter(|f| f.last_seq > st.replayed) {
        each_record(&f.path, f.len, |r, size| {
            if r.seq > st.replayed {
                n += 1;
                bytes += size;
                oldest.get_or_insert(r.spooled_at_ms);
                if r.maybe_written {
                    maybe = Some(maybe.map_or(r.spooled_at_ms, |m| m.min(r.spooled_at_ms)));
                }
                parts.insert((r.tenant, r.queue.clone(), r.partition.clone()), r.seq);
            }
        })?;
    }
    st.pending_records = n;
    st.pending_bytes = bytes;
    st.partitions = parts;
    st.oldest_pending_ms = oldest;
    st.maybe_written_since = maybe;
    Ok(())
}

/// The directory's exclusive lock: a second broker on the same spool would replay its
/// records twice.
fn lock_dir(dir: &Path) -> Result<File, String> {
    use std::os::fd::AsRawFd;
    let path = dir.join("lock");
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| io("spool: cannot open", &path, e))?;
    // SAFETY: flock on a descriptor this function owns; no memory is involved.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(format!(
            "QUEEN_SPOOL_DIR {} is in use by another broker (each broker needs its own spool directory)",
            dir.display()
        ));
    }
    Ok(f)
}

fn read_or_make_id(dir: &Path) -> Result<Uuid, String> {
    let path = dir.join("spool.id");
    if let Ok(s) = fs::read_to_string(&path) {
        return Uuid::parse_str(s.trim()).map_err(|e| format!("{}: {e}", path.display()));
    }
    make_id(dir)
}

/// A new id for the spool, written durably to `spool.id`.
fn make_id(dir: &Path) -> Result<Uuid, String> {
    let id = Uuid::new_v4();
    write_durably(dir, "spool.id", id.to_string().as_bytes())?;
    Ok(id)
}

/// The writer thread: group commit.
struct Writer {
    dir: PathBuf,
    state: Arc<Mutex<State>>,
    counters: Arc<SpoolCounters>,
    appended: Arc<Notify>,
    /// The open file being appended to, and its size.
    file: Option<(File, u64)>,
    /// `highwater` as written: no number above it is used before it is moved.
    reserved: u64,
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<(Vec<Record>, Reply)>) {
        while let Ok(first) = rx.recv() {
            let mut batch = vec![first];
            while let Ok(more) = rx.try_recv() {
                batch.push(more);
            }
            let result = self.commit(&mut batch);
            if result.is_err() {
                self.counters.write_failures.fetch_add(1, Ordering::Relaxed);
            }
            for (_, reply) in batch {
                let _ = reply.send(
                    result
                        .as_ref()
                        .map(|_| ())
                        .map_err(|e| AppendError::Io(e.clone())),
                );
            }
            self.appended.notify_one();
        }
    }

    /// Writes and syncs every record of `batch`, assigning sequence numbers; on failure
    /// the file is cut back and nothing of the batch counts (its numbers are skipped).
    /// The state lock is held only to assign numbers and to publish the result, never
    /// across the write and the sync: readers of the state (every push checking its
    /// partitions, the replay) never wait for the disk.
    fn commit(&mut self, batch: &mut [(Vec<Record>, Reply)]) -> Result<(), String> {
        let (first_seq, last_seq, rotate) = {
            let mut st = self.state.lock().expect("spool state");
            let first_seq = st.next_seq;
            for r in batch.iter_mut().flat_map(|(recs, _)| recs.iter_mut()) {
                r.seq = st.next_seq;
                st.next_seq += 1;
            }
            // Nothing pending in the current file: start a fresh one (the old one goes).
            let rotate = match (&self.file, st.files.back()) {
                (Some((_, size)), Some(f)) => *size >= FILE_BYTES || f.last_seq <= st.replayed,
                _ => true,
            };
            (first_seq, st.next_seq - 1, rotate)
        };
        if last_seq < first_seq {
            return Ok(());
        }
        if last_seq > self.reserved {
            // Durable before any of these numbers is: a restart continues above it.
            let reserved = last_seq + RESERVE;
            write_durably(&self.dir, "highwater", reserved.to_string().as_bytes())?;
            self.reserved = reserved;
        }
        let records = || batch.iter().flat_map(|(recs, _)| recs.iter());
        let mut frames = Vec::new();
        for r in records() {
            frames.extend_from_slice(&r.encode());
        }
        if rotate {
            self.rotate(first_seq)?;
        }
        let (file, size) = self.file.as_mut().expect("an open spool file");
        let at = *size;
        let written = file.write_all(&frames).and_then(|_| file.sync_data());
        self.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = written {
            let _ = file.set_len(at);
            self.file = None;
            return Err(e.to_string());
        }
        *size += frames.len() as u64;
        let len = *size;
        let mut st = self.state.lock().expect("spool state");
        let cur = st.files.back_mut().expect("the current file");
        cur.last_seq = last_seq;
        cur.len = len;
        st.pending_records += last_seq - first_seq + 1;
        st.pending_bytes += records().map(charge).sum::<u64>();
        st.oldest_pending_ms.get_or_insert(batch_time(batch));
        if let Some(t) = records()
            .filter(|r| r.maybe_written)
            .map(|r| r.spooled_at_ms)
            .min()
        {
            st.maybe_written_since = Some(st.maybe_written_since.map_or(t, |m| m.min(t)));
        }
        for r in records() {
            st.partitions
                .insert((r.tenant, r.queue.clone(), r.partition.clone()), r.seq);
        }
        drop(st);
        let n = last_seq - first_seq + 1;
        self.counters
            .spooled_records
            .fetch_add(n, Ordering::Relaxed);
        self.counters
            .spooled_bytes
            .fetch_add(frames.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// A new file from `first_seq` on; the current one goes if wholly replayed (the
    /// replay never deletes the newest file, so only this thread touches it).
    fn rotate(&mut self, first_seq: u64) -> Result<(), String> {
        self.file = None;
        let path = self.dir.join(format!("spool-{first_seq:020}.log"));
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|f| {
                File::open(&self.dir)?.sync_all()?;
                Ok(f)
            })
            .map_err(|e| io("spool: cannot create", &path, e))?;
        let mut st = self.state.lock().expect("spool state");
        while st.files.back().is_some_and(|f| f.last_seq <= st.replayed) {
            let old = st.files.pop_back().expect("a file");
            let _ = fs::remove_file(&old.path);
        }
        st.files.push_back(SpoolFile {
            path,
            first_seq,
            last_seq: first_seq - 1,
            len: 0,
        });
        self.file = Some((f, 0));
        Ok(())
    }
}

fn batch_time(batch: &[(Vec<Record>, Reply)]) -> u64 {
    batch
        .iter()
        .flat_map(|(r, _)| r.first())
        .map(|r| r.spooled_at_ms)
        .min()
        .unwrap_or_else(now_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(q: &str, p: &str, txn: &str, payload: &str) -> Record {
        Record {
            seq: 0,
            tenant: Uuid::nil(),
            queue: q.into(),
            partition: p.into(),
            txn: txn.into(),
            message_id: Uuid::now_v7(),
            trace: Some([7; 16]),
            encrypted: false,
            maybe_written: true,
            spooled_at_ms: 0,
            payload: payload.as_bytes().to_vec(),
            producer_sub: None,
        }
    }

    #[test]
    fn a_record_round_trips_and_damage_is_caught() {
        let mut r = rec("q", "p", "t-1", r#"{"n":1}"#);
        r.seq = 9;
        let frame = r.encode();
        let (back, n) = read_record(&mut &frame[..]).unwrap().unwrap();
        assert_eq!((back, n), (r.clone(), frame.len()));
        let mut bent = frame.clone();
        *bent.last_mut().unwrap() ^= 1;
        assert!(read_record(&mut &bent[..]).is_err(), "a flipped bit");
        assert!(
            read_record(&mut &frame[..frame.len() - 3]).is_err(),
            "a torn tail"
        );
        assert!(read_record(&mut &[][..]).unwrap().is_none(), "a clean end");
        // A stamped producer subject travels with its record (flag 8).
        let mut s = rec("q", "p", "t-2", "2");
        s.producer_sub = Some("alice".into());
        let frame = s.encode();
        let (back, _) = read_record(&mut &frame[..]).unwrap().unwrap();
        assert_eq!(back.producer_sub.as_deref(), Some("alice"));
        assert_eq!(back, s);
    }

    #[test]
    fn the_scan_goes_on_past_a_damaged_record() {
        let frames: Vec<Vec<u8>> = (1..=3)
            .map(|seq| {
                let mut r = rec("q", "p", &format!("t-{seq}"), r#"{"n":1}"#);
                r.seq = seq;
                r.encode()
            })
            .collect();
        let mut b = frames.concat();
        let (l0, l1) = (frames[0].len(), frames[1].len());
        b[l0 + HEADER + 30] ^= 1;
        let s = scan_bytes(&b, 1);
        assert_eq!(s.frames, vec![(0, l0), (l0 + l1, frames[2].len())]);
        assert_eq!(s.last, 3);
        assert_eq!(s.bad, vec![(l0, l1, "record checksum mismatch")]);
        // A torn tail: the region runs to the end, nothing after it.
        let torn = &frames.concat()[..b.len() - 4];
        let s = scan_bytes(torn, 1);
        assert_eq!((s.frames.len(), s.last), (2, 2));
        assert_eq!(s.bad.len(), 1);
        assert_eq!(s.bad[0].0 + s.bad[0].1, torn.len());
    }
}
