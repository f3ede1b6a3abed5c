//! The SDK's binary bodies (Queen 2.x's `binary_push` and `push_compression`;
//! docs/http-api.md "Binary bodies"): `QPB1` on `/push`, `QTB1` on `/transaction`. They
//! are read into the same [`PushItem`]s a JSON body gives, so every later step (tenancy,
//! sealing, dedup, the answer) is the JSON push's. All integers are little-endian.
//!
//! A group of framed messages (flag 8, and every `QTB1` group) is one zstd frame of the
//! messages as the database stores them (docs/contract.md §3): it is decoded strictly by
//! the shared codec and, when nothing in it must change, stored as it came, so the broker
//! compresses nothing ([`ReadySegment`]).

use queen_log::frame::Frame;
use queen_log::names::NameKind;
use queen_log::segment::decode_segment;
use uuid::Uuid;

use crate::engine::items::{PushItem, ReadySegment};
use crate::error::{ApiError, ApiResult};
use crate::http::input::check_name;

/// `POST /api/v1/push` with this body starts with it (the Content-Type is
/// `application/x-queen-push`, but the magic decides: no JSON body starts with `Q`).
pub const PUSH_MAGIC: &[u8] = b"QPB1";
/// `POST /api/v1/transaction` with the pushes framed after a JSON head.
pub const TXN_MAGIC: &[u8] = b"QTB1";

/// The body is one zstd frame of `raw_len` bytes.
const FLAG_ZSTD: u8 = 1;
/// Answer with counts instead of one object per message.
const FLAG_COUNTS: u8 = 2;
/// Every item carries its transactionId.
const FLAG_TXN: u8 = 4;
/// The groups are stored frames, compressed by the client.
const FLAG_FRAMES: u8 = 8;
const PUSH_FLAGS: u8 = FLAG_ZSTD | FLAG_COUNTS | FLAG_TXN | FLAG_FRAMES;

/// What a binary body carries.
pub struct BinaryPush {
    pub items: Vec<PushItem>,
    pub ready: Vec<ReadySegment>,
    /// Flag 2: the answer counts instead of listing.
    pub counts: bool,
}

/// A `QTB1` body: the JSON head (the transaction body without its pushes) and the pushes.
pub struct BinaryTransaction<'a> {
    pub head: &'a [u8],
    pub pushes: BinaryPush,
    /// How many push groups there are: each is one push operation after the head's.
    pub groups: Vec<usize>,
}

/// Whether a body is one of these (by its magic).
pub fn is_binary(body: &[u8], magic: &[u8]) -> bool {
    body.starts_with(magic)
}

/// Reads a `QPB1` body. `limit` bounds the decompressed size of a compressed body (the
/// body limit, `QUEEN_MAX_BODY_MB`).
pub fn read_push(body: &[u8], limit: usize) -> ApiResult<BinaryPush> {
    let mut r = Reader::new(body, "binary push body");
    r.take(PUSH_MAGIC.len())?;
    let flags = r.u8()?;
    if flags & !PUSH_FLAGS != 0 {
        return Err(r.bad(format!("unknown flags {flags:#04x}")));
    }
    let counts = flags & FLAG_COUNTS != 0;
    let raw;
    let mut r = if flags & FLAG_ZSTD != 0 {
        let raw_len = r.u32()? as usize;
        if raw_len > limit {
            return Err(r.bad(format!(
                "decompresses to {raw_len} bytes, over the body limit of {limit} bytes"
            )));
        }
        raw = zstd::bulk::decompress(r.rest(), raw_len).map_err(|e| r.bad(format!("zstd: {e}")))?;
        if raw.len() != raw_len {
            return Err(r.bad(format!("decompressed {} bytes, not {raw_len}", raw.len())));
        }
        Reader::new(&raw, "binary push body")
    } else {
        r
    };
    let mut out = BinaryPush {
        items: Vec::new(),
        ready: Vec::new(),
        counts,
    };
    let groups = r.u32()?;
    for _ in 0..groups {
        if flags & FLAG_FRAMES != 0 {
            read_frame_group(&mut r, &mut out)?;
        } else {
            read_plain_group(&mut r, flags & FLAG_TXN != 0, &mut out)?;
        }
    }
    r.end()?;
    Ok(out)
}

/// Reads a `QTB1` body: `u8 flags | u32 len, head | u32 groups | framed groups`.
pub fn read_transaction(body: &[u8]) -> ApiResult<BinaryTransaction<'_>> {
    let mut r = Reader::new(body, "binary transaction body");
    r.take(TXN_MAGIC.len())?;
    let flags = r.u8()?;
    if flags & !FLAG_COUNTS != 0 {
        return Err(r.bad(format!("unknown flags {flags:#04x}")));
    }
    let head_len = r.u32()? as usize;
    let head = r.take(head_len)?;
    let mut pushes = BinaryPush {
        items: Vec::new(),
        ready: Vec::new(),
        counts: flags & FLAG_COUNTS != 0,
    };
    let mut groups = Vec::new();
    for _ in 0..r.u32()? {
        let before = pushes.items.len();
        read_frame_group(&mut r, &mut pushes)?;
        groups.push(pushes.items.len() - before);
    }
    r.end()?;
    Ok(BinaryTransaction {
        head,
        pushes,
        groups,
    })
}

/// `u16 queue | u16 partition | u32 n`, checked as a JSON item's names are.
fn read_group_head(r: &mut Reader<'_>) -> ApiResult<(String, String, usize)> {
    let queue = r.text()?;
    check_name(NameKind::Queue, &queue).map_err(|e| r.bad(e.to_string()))?;
    let mut partition = r.text()?;
    if partition.is_empty() {
        partition = "Default".to_string();
    }
    check_name(NameKind::Partition, &partition).map_err(|e| r.bad(e.to_string()))?;
    let n = r.u32()? as usize;
    Ok((queue, partition, n))
}

/// `n x ([u16 txn, flag 4] | u32 len, payload)`: each payload one JSON document.
fn read_plain_group(r: &mut Reader<'_>, with_txn: bool, out: &mut BinaryPush) -> ApiResult<()> {
    let (queue, partition, n) = read_group_head(r)?;
    for _ in 0..n {
        let message_id = Uuid::now_v7();
        let txn = if with_txn { r.text()? } else { String::new() };
        let len = r.u32()? as usize;
        let payload = r.take(len)?.to_vec();
        check_payload(&payload)
            .and_then(|()| check_txn(&txn))
            .map_err(|m| r.bad(format!("item {}: {m}", out.items.len())))?;
        out.items.push(PushItem {
            queue: queue.clone(),
            partition: partition.clone(),
            txn: if txn.is_empty() {
                message_id.to_string()
            } else {
                txn
            },
            trace: None,
            payload,
            message_id,
            dup_of: None,
            encrypted: false,
            producer_sub: None,
        });
    }
    Ok(())
}

/// `u32 n | u32 z_len | z`: z one zstd frame of exactly n stored frames.
fn read_frame_group(r: &mut Reader<'_>, out: &mut BinaryPush) -> ApiResult<()> {
    let (queue, partition, n) = read_group_head(r)?;
    let z_len = r.u32()? as usize;
    let blob = r.take(z_len)?;
    let frames = decode_segment(blob).map_err(|e| r.bad(format!("{queue}/{partition}: {e}")))?;
    if frames.len() != n {
        return Err(r.bad(format!(
            "{queue}/{partition}: the group says {n} messages, its frames hold {}",
            frames.len()
        )));
    }
    let first = out.items.len();
    let mut as_sent = true;
    for (k, f) in frames.into_iter().enumerate() {
        let at = first + k;
        let item = frame_item(f, &queue, &partition, &mut as_sent)
            .map_err(|m| r.bad(format!("item {at}: {m}")))?;
        out.items.push(item);
    }
    if as_sent {
        out.ready.push(ReadySegment {
            items: (first..out.items.len()).collect(),
            blob: blob.to_vec(),
        });
    }
    Ok(())
}

/// A stored frame as a push item. A frame without a transactionId gets its message id's
/// text, as a JSON item does; the group is then encoded again (`as_sent` false).
fn frame_item(
    f: Frame,
    queue: &str,
    partition: &str,
    as_sent: &mut bool,
) -> Result<PushItem, String> {
    if f.encrypted {
        return Err("an encrypted frame: a queue that encrypts seals payloads itself".into());
    }
    if f.producer_sub.is_some() {
        return Err("a producer subject: the broker sets no producerSub from a push".into());
    }
    let message_id = Uuid::from_bytes(f.message_id);
    if message_id.get_version_num() != 7 {
        return Err(format!("message id {message_id} is not a version-7 UUID"));
    }
    check_payload(&f.payload)?;
    check_txn(&f.transaction_id)?;
    let txn = if f.transaction_id.is_empty() {
        *as_sent = false;
        message_id.to_string()
    } else {
        f.transaction_id
    };
    Ok(PushItem {
        queue: queue.to_string(),
        partition: partition.to_string(),
        txn,
        trace: f.trace_id,
        payload: f.payload,
        message_id,
        dup_of: None,
        encrypted: false,
        producer_sub: None,
    })
}

/// A payload is one JSON document in UTF-8 that PostgreSQL can hold (empty reads as JSON
/// null, as in a stored frame): the JSON push's rule, so that a binary push stores only
/// what every reader gets back byte for byte (docs/http-api.md, "Binary bodies").
/// (serde's `IgnoredAny` skipped strings unchecked: bytes that are not UTF-8 inside
/// quotes passed and read back as base64.)
fn check_payload(payload: &[u8]) -> Result<(), String> {
    queen_log::payload::check_write(payload).map_err(|e| e.to_string())
}

/// A transactionId holds no NUL (PostgreSQL text cannot).
fn check_txn(txn: &str) -> Result<(), String> {
    queen_log::payload::check_text(txn).map_err(|e| format!("transactionId: {e}"))
}

/// Little-endian fields off a body; reading past its end is a 400.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(data: &'a [u8], what: &'static str) -> Self {
        Reader { data, at: 0, what }
    }

    fn bad(&self, m: impl std::fmt::Display) -> ApiError {
        ApiError::bad(format!("{}: {m}", self.what))
    }

    fn take(&mut self, n: usize) -> ApiResult<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.data.len());
        let Some(end) = end else {
            return Err(self.bad(format!("truncated at byte {}", self.at)));
        };
        let piece = &self.data[self.at..end];
        self.at = end;
        Ok(piece)
    }

    fn u8(&mut self) -> ApiResult<u8> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> ApiResult<u16> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn u32(&mut self) -> ApiResult<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn text(&mut self) -> ApiResult<String> {
        let n = usize::from(self.u16()?);
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.bad("a name or id is not UTF-8"))
    }

    fn rest(&mut self) -> &'a [u8] {
        let rest = &self.data[self.at..];
        self.at = self.data.len();
        rest
    }

    fn end(&self) -> ApiResult<()> {
        if self.at != self.data.len() {
            return Err(self.bad(format!(
                "{} bytes after the last group",
                self.data.len() - self.at
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::items::take_ready;
    use queen_log::segment::encode_segment;

    /// (queue, partition, [(transactionId, payload JSON)]).
    type Group<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

    fn plain(flags: u8, groups: &[Group<'_>]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend((groups.len() as u32).to_le_bytes());
        for (q, p, items) in groups {
            for s in [q, p] {
                body.extend((s.len() as u16).to_le_bytes());
                body.extend(s.as_bytes());
            }
            body.extend((items.len() as u32).to_le_bytes());
            for (txn, payload) in *items {
                if flags & FLAG_TXN != 0 {
                    body.extend((txn.len() as u16).to_le_bytes());
                    body.extend(txn.as_bytes());
                }
                body.extend((payload.len() as u32).to_le_bytes());
                body.extend(payload.as_bytes());
            }
        }
        let mut out = PUSH_MAGIC.to_vec();
        if flags & FLAG_ZSTD != 0 {
            out.push(flags);
            out.extend((body.len() as u32).to_le_bytes());
            out.extend(zstd::bulk::compress(&body, 1).unwrap());
        } else {
            out.push(flags);
            out.extend(body);
        }
        out
    }

    fn frame(txn: &str, payload: &str) -> Frame {
        Frame {
            message_id: *Uuid::now_v7().as_bytes(),
            trace_id: None,
            transaction_id: txn.into(),
            producer_sub: None,
            encrypted: false,
            payload: payload.as_bytes().to_vec(),
        }
    }

    fn framed(q: &str, p: &str, frames: &[Frame]) -> Vec<u8> {
        let mut out = PUSH_MAGIC.to_vec();
        out.push(FLAG_FRAMES);
        out.extend(1u32.to_le_bytes());
        for s in [q, p] {
            out.extend((s.len() as u16).to_le_bytes());
            out.extend(s.as_bytes());
        }
        out.extend((frames.len() as u32).to_le_bytes());
        let z = encode_segment(frames).unwrap();
        out.extend((z.len() as u32).to_le_bytes());
        out.extend(z);
        out
    }

    #[test]
    fn plain_body_reads_items_in_order_and_mints_missing_ids() {
        let body = plain(FLAG_TXN, &[("q", "", &[("t1", "{\"a\":1}"), ("", "2")])]);
        let b = read_push(&body, 1 << 20).unwrap();
        assert_eq!(b.items.len(), 2);
        assert_eq!(b.items[0].txn, "t1");
        assert_eq!(b.items[0].partition, "Default");
        assert_eq!(b.items[1].txn, b.items[1].message_id.to_string());
        assert_eq!(b.items[1].payload, b"2");
        assert!(b.ready.is_empty());
    }

    #[test]
    fn compressed_plain_body_matches_uncompressed() {
        let groups: &[Group<'_>] = &[("q", "p", &[("x", "[1,2]")])];
        let a = read_push(&plain(FLAG_TXN | FLAG_ZSTD, groups), 1 << 20).unwrap();
        assert_eq!(a.items[0].payload, b"[1,2]");
        let err = read_push(&plain(FLAG_TXN | FLAG_ZSTD, groups), 4)
            .err()
            .unwrap();
        assert!(err.to_string().contains("over the body limit"), "{err}");
    }

    #[test]
    fn a_payload_that_is_not_json_is_refused() {
        let body = plain(0, &[("q", "p", &[("", "{oops")])]);
        let err = read_push(&body, 1 << 20).err().unwrap();
        assert!(
            err.to_string().contains("item 0: payload is not one JSON"),
            "{err}"
        );
    }

    #[test]
    fn truncated_and_trailing_bytes_are_refused() {
        let body = plain(0, &[("q", "p", &[("", "1")])]);
        for cut in [5, 9, body.len() - 1] {
            let err = read_push(&body[..cut], 1 << 20).err().unwrap();
            assert!(err.to_string().contains("truncated"), "{cut}: {err}");
        }
        let mut long = body.clone();
        long.push(0);
        assert!(read_push(&long, 1 << 20).is_err());
        let mut flags = body;
        flags[4] = 0x40;
        assert!(read_push(&flags, 1 << 20)
            .err()
            .unwrap()
            .to_string()
            .contains("unknown flags"));
    }

    #[test]
    fn a_bad_name_is_refused() {
        let body = plain(0, &[("", "p", &[("", "1")])]);
        assert!(read_push(&body, 1 << 20).is_err());
    }

    #[test]
    fn framed_group_is_ready_as_sent() {
        let frames = [frame("a", "1"), frame("b", "{}")];
        let body = framed("q", "p", &frames);
        let mut b = read_push(&body, 1 << 20).unwrap();
        assert_eq!(b.items[1].message_id.as_bytes(), &frames[1].message_id);
        assert_eq!(b.items[1].frame(), frames[1]);
        let blob = take_ready(&mut b.ready, &[0, 1]).unwrap();
        assert_eq!(decode_segment(&blob).unwrap(), frames);
        assert!(take_ready(&mut b.ready, &[0, 1]).is_none());
    }

    #[test]
    fn framed_group_without_txn_is_encoded_again() {
        let body = framed("q", "p", &[frame("", "1")]);
        let b = read_push(&body, 1 << 20).unwrap();
        assert_eq!(b.items[0].txn, b.items[0].message_id.to_string());
        assert!(b.ready.is_empty());
    }

    #[test]
    fn framed_group_refuses_what_a_push_cannot_carry() {
        let mut enc = frame("a", "1");
        enc.encrypted = true;
        let mut psub = frame("a", "1");
        psub.producer_sub = Some("me".into());
        let mut v4 = frame("a", "1");
        v4.message_id = *Uuid::new_v4().as_bytes();
        for (f, says) in [(enc, "encrypted"), (psub, "producer"), (v4, "version-7")] {
            let err = read_push(&framed("q", "p", &[f]), 1 << 20).err().unwrap();
            assert!(err.to_string().contains(says), "{err}");
        }
        let mut count = framed("q", "p", &[frame("a", "1")]);
        let n_at = 4 + 1 + 4 + 2 + 1 + 2 + 1;
        count[n_at] = 2;
        assert!(read_push(&count, 1 << 20)
            .err()
            .unwrap()
            .to_string()
            .contains("says 2"));
    }

    #[test]
    fn transaction_body_splits_head_and_groups() {
        let push = framed("q", "p", &[frame("a", "1")]);
        let mut body = TXN_MAGIC.to_vec();
        body.push(FLAG_COUNTS);
        let head = br#"{"operations":[]}"#;
        body.extend((head.len() as u32).to_le_bytes());
        body.extend(head);
        body.extend(&push[5..]);
        let t = read_transaction(&body).unwrap();
        assert_eq!(t.head, head);
        assert_eq!(t.groups, vec![1]);
        assert!(t.pushes.counts);
        assert_eq!(t.pushes.ready.len(), 1);
    }
}
