//! Name rules of queues, partitions and consumer groups (docs/contract.md §14), shared by the
//! broker (400) and the extension (22023) so both refuse exactly the same names.
//!
//! Every name is at most [`MAX_NAME_BYTES`] bytes of UTF-8. Bytes, not characters:
//! partition and group names are unbounded `text` keys of btree indexes, whose row limit
//! (2704 bytes) is a byte limit, and one byte rule for all three kinds is simpler than a
//! character rule for queue names (their `varchar(255)` column counts characters, so any
//! name this rule accepts also fits it) and a byte rule for the others.

use std::fmt;

/// Longest accepted name, in bytes of UTF-8.
pub const MAX_NAME_BYTES: usize = 255;

/// What a name names; only a queue name must be non-empty (an empty partition means
/// "Default" and an empty group queue mode over HTTP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameKind {
    Queue,
    Partition,
    ConsumerGroup,
}

impl NameKind {
    /// How error texts call it.
    pub fn label(self) -> &'static str {
        match self {
            NameKind::Queue => "queue",
            NameKind::Partition => "partition",
            NameKind::ConsumerGroup => "consumer group",
        }
    }
}

/// Why a name was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameError {
    /// A queue name that is empty.
    Empty(NameKind),
    /// Longer than [`MAX_NAME_BYTES`]; holds the name's length in bytes.
    TooLong(NameKind, usize),
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Empty(k) => write!(f, "{} name must not be empty", k.label()),
            NameError::TooLong(k, n) => write!(
                f,
                "{} name is {n} bytes long; at most {MAX_NAME_BYTES} bytes (UTF-8) are allowed",
                k.label()
            ),
        }
    }
}

impl std::error::Error for NameError {}

/// Checks one name of the given kind.
pub fn check_name(kind: NameKind, name: &str) -> Result<(), NameError> {
    if kind == NameKind::Queue && name.is_empty() {
        return Err(NameError::Empty(kind));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(NameError::TooLong(kind, name.len()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KINDS: [NameKind; 3] = [
        NameKind::Queue,
        NameKind::Partition,
        NameKind::ConsumerGroup,
    ];

    #[test]
    fn the_limit_is_255_bytes_for_every_kind() {
        for k in KINDS {
            assert_eq!(check_name(k, &"x".repeat(255)), Ok(()), "{k:?}");
            assert_eq!(
                check_name(k, &"x".repeat(256)),
                Err(NameError::TooLong(k, 256))
            );
            assert_eq!(
                check_name(k, &"x".repeat(10_240)),
                Err(NameError::TooLong(k, 10_240))
            );
        }
    }

    #[test]
    fn bytes_not_characters() {
        // 128 two-byte characters: 128 characters, 256 bytes.
        let e = "é".repeat(128);
        assert_eq!(e.chars().count(), 128);
        for k in KINDS {
            assert_eq!(check_name(k, &e), Err(NameError::TooLong(k, 256)));
            assert_eq!(check_name(k, &"é".repeat(127)), Ok(()));
        }
        // A four-byte character never straddles the limit into acceptance.
        let s = format!("{}{}", "x".repeat(252), "\u{1F4A9}");
        assert_eq!(s.len(), 256);
        assert!(check_name(NameKind::Partition, &s).is_err());
    }

    #[test]
    fn only_queue_names_must_be_non_empty() {
        assert_eq!(
            check_name(NameKind::Queue, ""),
            Err(NameError::Empty(NameKind::Queue))
        );
        assert_eq!(check_name(NameKind::Partition, ""), Ok(()));
        assert_eq!(check_name(NameKind::ConsumerGroup, ""), Ok(()));
    }

    #[test]
    fn error_texts_name_the_kind_and_the_limit() {
        let t = check_name(NameKind::ConsumerGroup, &"g".repeat(2800))
            .unwrap_err()
            .to_string();
        assert_eq!(
            t,
            "consumer group name is 2800 bytes long; at most 255 bytes (UTF-8) are allowed"
        );
        let t = check_name(NameKind::Queue, "").unwrap_err().to_string();
        assert_eq!(t, "queue name must not be empty");
    }
}
