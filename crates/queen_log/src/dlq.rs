//! The DLQ rules both halves apply: which error text a dead-lettered frame is filed with,
//! and how a dead-lettered message goes back into its partition (redrive).

use uuid::Uuid;

use crate::ack::Status;
use crate::frame::Frame;

/// The error text of a DLQ row filed by an ack's dlq hand-off (docs/broker-contract.md §2 step 5,
/// docs/contract.md §9): the error of the head signal that chose the branch, else the first
/// signal (nack) that carries an error, else this default.
pub const RETRIES_EXHAUSTED: &str = "Retries exhausted";

/// `elements`: (status, error) of the ack's input elements in input order; `head`: the
/// input index of the head signal (`headIndex` of the by-hash result).
pub fn error_text(elements: &[(Status, Option<&str>)], head: Option<usize>) -> String {
    fn given<'a>(e: &Option<&'a str>) -> Option<&'a str> {
        e.filter(|e| !e.is_empty())
    }
    head.and_then(|h| elements.get(h))
        .and_then(|(_, e)| given(e))
        .or_else(|| {
            elements
                .iter()
                .filter(|(s, _)| s.is_signal())
                .find_map(|(_, e)| given(e))
        })
        .unwrap_or(RETRIES_EXHAUSTED)
        .to_string()
}

/// The transactionId prefix of a redriven message.
pub const REDRIVE_PREFIX: &str = "dlq:";

/// The transactionId a redriven DLQ row is pushed under: `dlq:<DLQ row id>:<original
/// transactionId>` (`dlq:<DLQ row id>` when the original was not captured). Dedup cannot
/// swallow it: the original transactionId is still in the partition's dedup window (a
/// push under it would be a duplicate of the dead-lettered message itself), but the row
/// id is unique, so no earlier message carries this one; and a row is redriven at most
/// once (it leaves the DLQ in the same transaction). The original stays readable
/// ([`redriven_from`]), so a consumer can tell a redelivery by redrive and trace it.
pub fn redrive_txn(dlq_id: Uuid, original: Option<&str>) -> String {
    match original {
        Some(t) => format!("{REDRIVE_PREFIX}{dlq_id}:{t}"),
        None => format!("{REDRIVE_PREFIX}{dlq_id}"),
    }
}

/// The DLQ row id and original transactionId of a redriven message's transactionId;
/// None when it is not one.
pub fn redriven_from(txn: &str) -> Option<(Uuid, Option<&str>)> {
    let rest = txn.strip_prefix(REDRIVE_PREFIX)?;
    let (id, original) = match rest.split_at_checked(36) {
        Some((id, "")) => (id, None),
        Some((id, tail)) => (id, Some(tail.strip_prefix(':')?)),
        None => return None,
    };
    Some((Uuid::parse_str(id).ok()?, original))
}

/// Rows dead-lettered for the same message (same partition and offset, filed by several
/// consumer groups) go back as ONE new message: every group reads the partition's log,
/// so one copy reaches them all, and one copy per row would deliver it twice to each.
/// `keys` are (partition, offset) per row; returns the rows of each message in input
/// order, messages ordered by (partition, offset), so each partition's messages are
/// pushed in their original order.
pub fn redrive_groups<P: Ord + Copy>(keys: &[(P, i64)]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&i| (keys[i], i));
    let mut out: Vec<Vec<usize>> = Vec::new();
    for i in order {
        match out.last_mut() {
            Some(g) if keys[g[0]] == keys[i] => g.push(i),
            _ => out.push(vec![i]),
        }
    }
    out
}

/// Why a DLQ row cannot be redriven.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedriveRefusal {
    /// Its segment was retained away and the row holds no payload snapshot.
    PayloadNotCaptured,
    /// The redrive transactionId would exceed the frame format's limit.
    TransactionIdTooLong(usize),
}

impl std::fmt::Display for RedriveRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::PayloadNotCaptured => f.write_str(
                "payload not captured: the segment is gone and the DLQ row holds no payload",
            ),
            Self::TransactionIdTooLong(n) => write!(
                f,
                "the redrive transactionId would be {n} bytes (maximum {})",
                u16::MAX
            ),
        }
    }
}

/// The frame a DLQ row goes back as: a new message id and the redrive transactionId,
/// everything else as it was. The original frame, while its segment still holds it, is
/// the exact message (payload bytes, trace id, producer subject, encryption flag); once
/// retention took the segment, the row's payload snapshot (JSON text; JSON null is an
/// empty payload, as a push writes it), flagged encrypted when it is an encryption
/// envelope AND its queue encrypts (`queue_encrypts`): only the broker seals
/// (docs/security.md), and a queue that encrypts holds nothing the broker did not seal,
/// so an envelope-shaped snapshot of any other queue is a client's plain JSON and goes
/// back as such, never as a forged sealed message.
pub fn redriven_frame(
    original: Option<&Frame>,
    snapshot: Option<&str>,
    queue_encrypts: bool,
    message_id: [u8; 16],
    transaction_id: String,
) -> Result<Frame, RedriveRefusal> {
    if transaction_id.len() > usize::from(u16::MAX) {
        return Err(RedriveRefusal::TransactionIdTooLong(transaction_id.len()));
    }
    match (original, snapshot) {
        (Some(f), _) => Ok(Frame {
            message_id,
            transaction_id,
            ..f.clone()
        }),
        (None, Some(json)) => Ok(Frame {
            message_id,
            trace_id: None,
            transaction_id,
            producer_sub: None,
            encrypted: queue_encrypts && crate::encryption::is_envelope(json.as_bytes()),
            payload: if json == "null" {
                Vec::new()
            } else {
                json.as_bytes().to_vec()
            },
        }),
        (None, None) => Err(RedriveRefusal::PayloadNotCaptured),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Status::*;

    #[test]
    fn redrive_txn_is_unique_per_row_and_reads_back() {
        let id = Uuid::from_u128(7);
        let t = redrive_txn(id, Some("order-1:a"));
        assert_eq!(t, format!("dlq:{id}:order-1:a"));
        assert_eq!(redriven_from(&t), Some((id, Some("order-1:a"))));
        assert_eq!(redriven_from(&redrive_txn(id, None)), Some((id, None)));
        assert_ne!(redrive_txn(Uuid::from_u128(8), Some("order-1:a")), t);
        for other in ["order-1", "dlq:", "dlq:not-a-uuid", &format!("dlq:{id}x")] {
            assert_eq!(redriven_from(other), None, "{other}");
        }
        // A redrive of a redriven message nests, and still reads back.
        let again = redrive_txn(Uuid::from_u128(9), Some(&t));
        assert_eq!(redriven_from(&again).unwrap().1, Some(t.as_str()));
    }

    #[test]
    fn rows_of_one_message_collapse_into_one_redrive_in_log_order() {
        let keys = [(2, 5), (1, 9), (2, 5), (1, 3), (2, 4)];
        assert_eq!(
            redrive_groups(&keys),
            vec![vec![3], vec![1], vec![4], vec![0, 2]]
        );
        assert!(redrive_groups::<u8>(&[]).is_empty());
    }

    fn frame() -> Frame {
        Frame {
            message_id: [1; 16],
            trace_id: Some([2; 16]),
            transaction_id: "t".into(),
            producer_sub: Some("p".into()),
            encrypted: true,
            payload: b"\xff raw".to_vec(),
        }
    }

    #[test]
    fn a_redriven_frame_keeps_the_original_message_but_its_id_and_txn() {
        let f = redriven_frame(Some(&frame()), Some("{}"), false, [9; 16], "dlq:x".into()).unwrap();
        assert_eq!(
            f,
            Frame {
                message_id: [9; 16],
                transaction_id: "dlq:x".into(),
                ..frame()
            }
        );
        let s = redriven_frame(None, Some(r#"{"a": 1}"#), true, [9; 16], "dlq:x".into()).unwrap();
        assert_eq!(
            (s.payload.as_slice(), s.trace_id),
            (&br#"{"a": 1}"#[..], None)
        );
        let n = redriven_frame(None, Some("null"), true, [9; 16], "dlq:x".into()).unwrap();
        assert!(n.payload.is_empty(), "JSON null is an empty payload");
        assert!(!s.encrypted);
        // A sealed message's snapshot is its envelope: it goes back flagged encrypted.
        let iv = "AAAAAAAAAAAAAAAAAAAAAA==";
        let env = format!(r#"{{"iv": "{iv}", "authTag": "{iv}", "encrypted": "YQ=="}}"#);
        let e = redriven_frame(None, Some(&env), true, [9; 16], "dlq:x".into()).unwrap();
        assert!(
            e.encrypted,
            "an envelope snapshot of an encrypting queue is redriven as sealed"
        );
        // The same shape in a queue that does not encrypt is a client's plain JSON: it
        // must not come back as a sealed message nobody sealed.
        let f = redriven_frame(None, Some(&env), false, [9; 16], "dlq:x".into()).unwrap();
        assert!(
            !f.encrypted,
            "a plain envelope-shaped payload is not taken as sealed"
        );
        assert_eq!(f.payload, env.as_bytes());
    }

    #[test]
    fn a_row_without_frame_or_snapshot_or_with_a_huge_txn_is_refused() {
        assert_eq!(
            redriven_frame(None, None, false, [9; 16], "dlq:x".into()),
            Err(RedriveRefusal::PayloadNotCaptured)
        );
        let long = "x".repeat(usize::from(u16::MAX) + 1);
        assert_eq!(
            redriven_frame(Some(&frame()), None, false, [9; 16], long),
            Err(RedriveRefusal::TransactionIdTooLong(65536))
        );
    }

    #[test]
    fn the_head_signals_error_wins() {
        let el = [
            (Failed, Some("first")),
            (Completed, Some("ignored")),
            (Dlq, Some("head")),
        ];
        assert_eq!(error_text(&el, Some(2)), "head");
    }

    #[test]
    fn else_the_first_nack_with_an_error() {
        let el = [
            (Completed, Some("ok items never count")),
            (Failed, None),
            (Retry, Some("second")),
        ];
        assert_eq!(error_text(&el, Some(1)), "second");
        assert_eq!(error_text(&el, None), "second");
    }

    #[test]
    fn else_retries_exhausted() {
        assert_eq!(
            error_text(&[(Failed, Some(""))], Some(0)),
            RETRIES_EXHAUSTED
        );
        assert_eq!(error_text(&[], None), RETRIES_EXHAUSTED);
    }
}
