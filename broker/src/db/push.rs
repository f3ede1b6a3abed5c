//! Pushes (docs/contract.md §4) and what a push reads first: the partitions it targets
//! and their dedup windows.

use futures_util::TryStreamExt;
use queen_log::wire::PushVerdict;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::{get, Conn, DbError};

/// One encoded segment for one (queue, partition) of one push round.
pub struct PushSegment {
    pub tenant: Uuid,
    pub queue: String,
    pub partition: String,
    pub count: i32,
    pub hashes: Vec<u8>,
    pub blob: Vec<u8>,
    /// The dedup watermark (`p_verified`, -1 = probe the window).
    pub verified: i64,
    /// The partition and dedup window `verified` was computed for: the extension trusts
    /// it only for that partition under a window no longer than that (docs/decisions.md,
    /// "The push's lookup").
    pub verified_for: Option<(Uuid, i32)>,
}

/// A row of `partitions_lookup_v1`: a requested (queue, partition) whose queue exists.
pub struct PartitionFound {
    /// Index (0-based) of the request element.
    pub index: usize,
    /// None: the queue exists, the partition not yet.
    pub partition_id: Option<Uuid>,
    /// The queue's dedup window now, seconds.
    pub dedup_window: i32,
    /// The queue's `encryptionEnabled`.
    pub encrypted: bool,
}

/// A row of `dedup_window_v1`: every row carries the snapshot's `last_offset` and
/// window; `base`/`hashes` are one in-window sidecar row (None: no row in the window).
pub struct DedupRow<'a> {
    pub last_offset: i64,
    pub window: i32,
    pub base: Option<i64>,
    pub hashes: Option<&'a [u8]>,
}

impl Conn {
    /// `queen.partitions_lookup_v1`: the requested (queue, partition) pairs of `tenant`
    /// whose queue exists, with the partition's id and the queue's dedup window and
    /// encryption switch.
    pub async fn partitions_lookup(
        &self,
        tenant: Uuid,
        queues: &[&str],
        partitions: &[&str],
    ) -> Result<Vec<PartitionFound>, DbError> {
        let rows = self
            .rows(
                "SELECT r_index, r_partition_id, r_dedup_window, r_encrypted
                   FROM queen.partitions_lookup_v1($1::uuid, $2::text[], $3::text[])",
                &[&tenant, &queues, &partitions],
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(PartitionFound {
                    index: (get::<i32>(r, 0)? - 1) as usize,
                    partition_id: get(r, 1)?,
                    dedup_window: get(r, 2)?,
                    encrypted: get(r, 3)?,
                })
            })
            .collect()
    }

    /// `queen.log_push_multi_v1`: `segs` in one transaction, one verdict per segment in
    /// order. The one place the broker pushes (fused, alone, or with fusion off).
    pub async fn log_push_multi(&self, segs: &[&PushSegment]) -> Result<Vec<PushVerdict>, DbError> {
        let queues: Vec<&str> = segs.iter().map(|s| s.queue.as_str()).collect();
        let parts: Vec<&str> = segs.iter().map(|s| s.partition.as_str()).collect();
        let counts: Vec<i32> = segs.iter().map(|s| s.count).collect();
        let hashes: Vec<&[u8]> = segs.iter().map(|s| s.hashes.as_slice()).collect();
        let verified: Vec<i64> = segs.iter().map(|s| s.verified).collect();
        let blobs: Vec<&[u8]> = segs.iter().map(|s| s.blob.as_slice()).collect();
        let tenants: Vec<Uuid> = segs.iter().map(|s| s.tenant).collect();
        let for_pids: Vec<Option<Uuid>> =
            segs.iter().map(|s| s.verified_for.map(|f| f.0)).collect();
        let for_windows: Vec<Option<i32>> =
            segs.iter().map(|s| s.verified_for.map(|f| f.1)).collect();
        let verdicts: Vec<PushVerdict> = self
            .json(
                "SELECT queen.log_push_multi_v1($1::text[], $2::text[], $3::int[], $4::bytea[], \
                 $5::bigint[], $6::bytea[], $7::uuid[], $8::uuid[], $9::int[])",
                &[
                    &queues,
                    &parts,
                    &counts,
                    &hashes,
                    &verified,
                    &blobs,
                    &tenants,
                    &for_pids,
                    &for_windows,
                ],
            )
            .await?;
        if verdicts.len() != segs.len() {
            return Err(DbError::Unreadable(format!(
                "log_push_multi_v1 answered {} verdicts for {} segments",
                verdicts.len(),
                segs.len()
            )));
        }
        Ok(verdicts)
    }

    /// `queen.log_push_one_v1` with its dedup window given (`p_window`): one segment
    /// whose hashes are looked for over `window` seconds instead of the queue's window (a
    /// spooled push that may have been written before it was spooled).
    pub async fn log_push_one_windowed(
        &self,
        seg: &PushSegment,
        window: i32,
    ) -> Result<PushVerdict, DbError> {
        self.json(
            "SELECT queen.log_push_one_v1($1::text, $2::text, $3::int, $4::bytea, $5::bigint, \
             $6::bytea, NULL::uuid, $7::int, $8::uuid)",
            &[
                &seg.queue,
                &seg.partition,
                &seg.count,
                &seg.hashes,
                &seg.verified,
                &seg.blob,
                &window,
                &seg.tenant,
            ],
        )
        .await
    }

    /// `queen.dedup_window_v1`: `pid`'s window in one snapshot, oldest sidecar row
    /// first, streamed to `each` (no second copy of the window in memory). `each`
    /// returns false to stop reading (dropping the stream ends the read).
    pub async fn dedup_window(
        &self,
        pid: Uuid,
        mut each: impl FnMut(&DedupRow<'_>) -> bool,
    ) -> Result<(), DbError> {
        let stmt = self.watch(
            self.client()
                .prepare_cached(
                    "SELECT r_last_offset, r_window, r_base, r_hashes FROM queen.dedup_window_v1($1)",
                )
                .await,
        )?;
        let params: [&(dyn ToSql + Sync); 1] = [&pid];
        let rows = self.watch(self.client().query_raw(&stmt, params).await)?;
        futures_util::pin_mut!(rows);
        while let Some(row) = self.watch(rows.try_next().await)? {
            let r = DedupRow {
                last_offset: get(&row, 0)?,
                window: get(&row, 1)?,
                base: get(&row, 2)?,
                hashes: get(&row, 3)?,
            };
            if !each(&r) {
                break;
            }
        }
        Ok(())
    }
}
