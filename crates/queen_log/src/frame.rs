//! The frame codec of docs/contract.md §3.
//!
//! A frame is little-endian: `u32 body_len`, then the body: `u8 flags`
//! (1 = trace id present, 2 = producer subject present, 4 = payload encrypted),
//! the 16-byte message id, the 16-byte trace id if flag 1, `u16 txn_len` + UTF-8
//! transactionId, `u16 psub_len` + UTF-8 producer subject if flag 2, and the payload
//! (JSON text bytes) as the rest of the body.
//!
//! Decoding is strict: anything that is not exactly a sequence of well-formed frames is
//! reported as a corrupt segment, because a lenient decoder could silently drop or
//! invent messages. Decoding never panics, whatever the input.

use std::fmt;

/// Flag bit: a 16-byte trace id follows the message id.
const FLAG_TRACE: u8 = 1;
/// Flag bit: a length-prefixed producer subject follows the transactionId.
const FLAG_PRODUCER_SUB: u8 = 2;
/// Flag bit: the payload is encrypted (opaque to the log).
const FLAG_ENCRYPTED: u8 = 4;
/// Every bit a valid frame may set; anything else is corruption, not a future extension.
const KNOWN_FLAGS: u8 = FLAG_TRACE | FLAG_PRODUCER_SUB | FLAG_ENCRYPTED;

/// Smallest possible body: flags (1) + message id (16) + txn_len (2).
pub const MIN_BODY_LEN: usize = 19;

/// One message as stored in a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The message's uuid, as its 16 raw bytes.
    pub message_id: [u8; 16],
    /// Optional trace id (flag 1).
    pub trace_id: Option<[u8; 16]>,
    /// The transactionId the ack contract keys on.
    pub transaction_id: String,
    /// Optional producer subject (flag 2).
    pub producer_sub: Option<String>,
    /// Whether the payload is encrypted (flag 4).
    pub encrypted: bool,
    /// Payload bytes (JSON text; empty means JSON null).
    pub payload: Vec<u8>,
}

/// Why a frame or segment could not be encoded or decoded.
///
/// Decode problems render as `corrupt segment: ...`; frame indexes are 0-based
/// positions within the decoded stream, byte offsets are 0-based within it too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodecError {
    /// Encode: the transactionId is longer than `u16::MAX` bytes; holds its length.
    TxnIdTooLong(usize),
    /// Encode: the producer subject is longer than `u16::MAX` bytes; holds its length.
    ProducerSubTooLong(usize),
    /// Encode: the body would exceed `u32::MAX` bytes; holds its length.
    BodyTooLong(usize),
    /// A body shorter than [`MIN_BODY_LEN`].
    BodyTooShort {
        /// Index of the frame.
        frame: usize,
        /// Its declared body length.
        len: usize,
    },
    /// The stream ends inside a length prefix or a body starting at `offset`.
    Truncated {
        /// Byte offset of the frame's length prefix.
        offset: usize,
    },
    /// Bytes follow the single zstd frame of a segment blob; holds their count.
    TrailingBytes(usize),
    /// Flag bits other than 1, 2 and 4 are set.
    UnknownFlags {
        /// Index of the frame.
        frame: usize,
        /// The whole flags byte.
        flags: u8,
    },
    /// A field (or its length) runs past the end of its body.
    FieldOverrun {
        /// Index of the frame.
        frame: usize,
        /// Name of the field.
        field: &'static str,
    },
    /// The transactionId or producer subject is not valid UTF-8.
    BadUtf8 {
        /// Index of the frame.
        frame: usize,
        /// Name of the field.
        field: &'static str,
    },
    /// The payload is not valid UTF-8, so it cannot be JSON text; holds the valid prefix length.
    PayloadNotUtf8(usize),
    /// zstd rejected the blob; holds zstd's message.
    Zstd(String),
    /// The decompressed segment exceeds the given cap (see `segment::MAX_SEGMENT_BYTES`).
    TooLarge(usize),
    /// The segment holds another number of frames than its row says.
    FrameCountMismatch {
        /// Frames the segment row (msg_count, or the offset looked up) needs.
        expected: usize,
        /// Frames the blob holds.
        found: usize,
    },
    /// A frame's transactionId does not hash to the sidecar hash stored for it.
    HashMismatch {
        /// Index of the frame.
        frame: usize,
    },
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TxnIdTooLong(n) => write!(f, "transactionId is {n} bytes (maximum {})", u16::MAX),
            Self::ProducerSubTooLong(n) => {
                write!(f, "producer subject is {n} bytes (maximum {})", u16::MAX)
            }
            Self::BodyTooLong(n) => write!(f, "frame body is {n} bytes (maximum {})", u32::MAX),
            Self::BodyTooShort { frame, len } => write!(
                f,
                "corrupt segment: frame {frame} body is {len} bytes (minimum {MIN_BODY_LEN})"
            ),
            Self::Truncated { offset } => {
                write!(f, "corrupt segment: truncated frame at byte {offset}")
            }
            Self::TrailingBytes(n) => write!(f, "corrupt segment: {n} trailing bytes"),
            Self::UnknownFlags { frame, flags } => write!(
                f,
                "corrupt segment: frame {frame} has unknown flag bits {flags:#04x}"
            ),
            Self::FieldOverrun { frame, field } => {
                write!(
                    f,
                    "corrupt segment: frame {frame} {field} overruns its body"
                )
            }
            Self::BadUtf8 { frame, field } => {
                write!(
                    f,
                    "corrupt segment: frame {frame} {field} is not valid UTF-8"
                )
            }
            Self::PayloadNotUtf8(at) => write!(
                f,
                "corrupt segment: payload is not valid UTF-8 (at byte {at})"
            ),
            Self::Zstd(msg) => write!(f, "corrupt segment: zstd: {msg}"),
            Self::TooLarge(cap) => {
                write!(f, "corrupt segment: decompressed size exceeds {cap} bytes")
            }
            Self::FrameCountMismatch { expected, found } => write!(
                f,
                "corrupt segment: {found} frames where {expected} are expected"
            ),
            Self::HashMismatch { frame } => write!(
                f,
                "corrupt segment: frame {frame} transactionId does not match its sidecar hash"
            ),
        }
    }
}

impl std::error::Error for CodecError {}

impl Frame {
    /// The payload as JSON text. An empty payload means JSON null, so callers never
    /// have to special-case it; non-UTF-8 bytes cannot be JSON and are an error.
    pub fn payload_json(&self) -> Result<&str, CodecError> {
        if self.payload.is_empty() {
            return Ok("null");
        }
        std::str::from_utf8(&self.payload).map_err(|e| CodecError::PayloadNotUtf8(e.valid_up_to()))
    }

    /// The flags byte this frame encodes with.
    fn flags(&self) -> u8 {
        let mut flags = 0;
        if self.trace_id.is_some() {
            flags |= FLAG_TRACE;
        }
        if self.producer_sub.is_some() {
            flags |= FLAG_PRODUCER_SUB;
        }
        if self.encrypted {
            flags |= FLAG_ENCRYPTED;
        }
        flags
    }

    /// Body length, checked against every length field, so encoding can fail before
    /// touching the output buffer.
    fn checked_body_len(&self) -> Result<u32, CodecError> {
        let txn = self.transaction_id.len();
        if txn > usize::from(u16::MAX) {
            return Err(CodecError::TxnIdTooLong(txn));
        }
        let psub = self.producer_sub.as_ref().map_or(0, |s| 2 + s.len());
        if psub > 2 + usize::from(u16::MAX) {
            return Err(CodecError::ProducerSubTooLong(psub - 2));
        }
        let trace = if self.trace_id.is_some() { 16 } else { 0 };
        // Cannot overflow: every term but the payload is bounded by a few hundred KiB,
        // and a Vec's length is at most isize::MAX.
        let len = MIN_BODY_LEN + trace + txn + psub + self.payload.len();
        u32::try_from(len).map_err(|_| CodecError::BodyTooLong(len))
    }
}

/// Appends one encoded frame to `out`. On error `out` is left untouched, so a caller
/// building a segment never ends up with half a frame.
pub fn encode_frame(f: &Frame, out: &mut Vec<u8>) -> Result<(), CodecError> {
    let body_len = f.checked_body_len()?;
    out.reserve(4 + body_len as usize);
    out.extend_from_slice(&body_len.to_le_bytes());
    out.push(f.flags());
    out.extend_from_slice(&f.message_id);
    if let Some(trace) = &f.trace_id {
        out.extend_from_slice(trace);
    }
    push_str16(out, &f.transaction_id);
    if let Some(psub) = &f.producer_sub {
        push_str16(out, psub);
    }
    out.extend_from_slice(&f.payload);
    Ok(())
}

/// Appends a `u16`-length-prefixed string; the caller has checked the length fits.
fn push_str16(out: &mut Vec<u8>, s: &str) {
    let len = u16::try_from(s.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Decodes a concatenation of frames. The whole input must be consumed by complete
/// frames; any leftover or malformed byte is an error. Never panics.
pub fn decode_frames(bytes: &[u8]) -> Result<Vec<Frame>, CodecError> {
    let mut frames = Vec::new();
    let mut offset = 0;
    while offset < bytes.len() {
        let rest = &bytes[offset..];
        let truncated = CodecError::Truncated { offset };
        let prefix: [u8; 4] = rest
            .get(..4)
            .and_then(|p| p.try_into().ok())
            .ok_or(truncated.clone())?;
        let len = u32::from_le_bytes(prefix) as usize;
        let body = rest[4..].get(..len).ok_or(truncated)?;
        frames.push(decode_body(frames.len(), body)?);
        offset += 4 + len;
    }
    Ok(frames)
}

/// Decodes one frame body (without its length prefix).
fn decode_body(frame: usize, body: &[u8]) -> Result<Frame, CodecError> {
    if body.len() < MIN_BODY_LEN {
        return Err(CodecError::BodyTooShort {
            frame,
            len: body.len(),
        });
    }
    let mut r = BodyReader { frame, rest: body };
    let flags = r.take(1, "flags")?[0];
    if flags & !KNOWN_FLAGS != 0 {
        return Err(CodecError::UnknownFlags { frame, flags });
    }
    let message_id = r.array16("message id")?;
    let trace_id = (flags & FLAG_TRACE != 0)
        .then(|| r.array16("trace id"))
        .transpose()?;
    let transaction_id = r.str16("transactionId")?;
    let producer_sub = (flags & FLAG_PRODUCER_SUB != 0)
        .then(|| r.str16("producer subject"))
        .transpose()?;
    Ok(Frame {
        message_id,
        trace_id,
        transaction_id,
        producer_sub,
        encrypted: flags & FLAG_ENCRYPTED != 0,
        payload: r.rest.to_vec(),
    })
}

/// Bounds-checked cursor over one body; every read reports which field overran.
struct BodyReader<'a> {
    frame: usize,
    rest: &'a [u8],
}

impl<'a> BodyReader<'a> {
    /// Takes the next `n` bytes, or reports `field` as overrunning the body.
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], CodecError> {
        if n > self.rest.len() {
            let frame = self.frame;
            return Err(CodecError::FieldOverrun { frame, field });
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    /// Takes a fixed 16-byte id.
    fn array16(&mut self, field: &'static str) -> Result<[u8; 16], CodecError> {
        let mut out = [0u8; 16];
        out.copy_from_slice(self.take(16, field)?);
        Ok(out)
    }

    /// Takes a `u16`-length-prefixed UTF-8 string.
    fn str16(&mut self, field: &'static str) -> Result<String, CodecError> {
        let len = self.take(2, field)?;
        let len = usize::from(u16::from_le_bytes([len[0], len[1]]));
        let bytes = self.take(len, field)?;
        let frame = self.frame;
        let s = std::str::from_utf8(bytes).map_err(|_| CodecError::BadUtf8 { frame, field })?;
        Ok(s.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(txn: &str) -> Frame {
        Frame {
            message_id: [7; 16],
            trace_id: None,
            transaction_id: txn.to_owned(),
            producer_sub: None,
            encrypted: false,
            payload: br#"{"a":1}"#.to_vec(),
        }
    }

    fn encode(f: &Frame) -> Vec<u8> {
        let mut out = Vec::new();
        encode_frame(f, &mut out).unwrap();
        out
    }

    fn round_trip(f: &Frame) {
        assert_eq!(decode_frames(&encode(f)), Ok(vec![f.clone()]));
    }

    /// A raw frame: length prefix computed from the body.
    fn raw(body: &[u8]) -> Vec<u8> {
        let mut out = (body.len() as u32).to_le_bytes().to_vec();
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn exact_byte_layout() {
        let f = Frame {
            message_id: [0x11; 16],
            trace_id: Some([0x22; 16]),
            transaction_id: "t1".to_owned(),
            producer_sub: Some("p".to_owned()),
            encrypted: true,
            payload: b"{}".to_vec(),
        };
        #[rustfmt::skip]
        let mut expected: Vec<u8> = vec![
            42, 0, 0, 0,                 // body_len = 1 + 16 + 16 + 2 + 2 + 2 + 1 + 2
            0x07,                        // flags: trace | producer sub | encrypted
        ];
        expected.extend_from_slice(&[0x11; 16]); // message id
        expected.extend_from_slice(&[0x22; 16]); // trace id
        expected.extend_from_slice(&[2, 0, b't', b'1']); // txn_len + "t1"
        expected.extend_from_slice(&[1, 0, b'p']); // psub_len + "p"
        expected.extend_from_slice(b"{}"); // payload
        assert_eq!(encode(&f), expected);
        assert_eq!(decode_frames(&expected), Ok(vec![f]));
    }

    #[test]
    fn exact_byte_layout_minimal() {
        let f = Frame {
            message_id: [0xab; 16],
            trace_id: None,
            transaction_id: String::new(),
            producer_sub: None,
            encrypted: false,
            payload: Vec::new(),
        };
        let mut expected = vec![19, 0, 0, 0, 0x00];
        expected.extend_from_slice(&[0xab; 16]);
        expected.extend_from_slice(&[0, 0]);
        assert_eq!(encode(&f), expected);
        round_trip(&f);
    }

    #[test]
    fn round_trip_plain() {
        round_trip(&frame("txn-1"));
    }

    #[test]
    fn round_trip_with_trace_id() {
        round_trip(&Frame {
            trace_id: Some([9; 16]),
            ..frame("txn-2")
        });
    }

    #[test]
    fn round_trip_with_producer_sub() {
        round_trip(&Frame {
            producer_sub: Some("svc/orders".into()),
            ..frame("txn-3")
        });
        round_trip(&Frame {
            producer_sub: Some(String::new()),
            ..frame("txn-3")
        });
    }

    #[test]
    fn round_trip_encrypted() {
        let f = Frame {
            encrypted: true,
            payload: vec![0, 159, 146, 150],
            ..frame("t")
        };
        round_trip(&f);
        assert!(f.payload_json().is_err());
    }

    #[test]
    fn round_trip_all_options_and_unicode() {
        round_trip(&Frame {
            trace_id: Some([1; 16]),
            producer_sub: Some("prodücer".into()),
            encrypted: true,
            ..frame("trånsäction-✓")
        });
    }

    #[test]
    fn empty_payload_is_json_null() {
        let f = Frame {
            payload: Vec::new(),
            ..frame("t")
        };
        round_trip(&f);
        assert_eq!(f.payload_json(), Ok("null"));
        assert_eq!(frame("t").payload_json(), Ok(r#"{"a":1}"#));
    }

    #[test]
    fn payload_json_rejects_bad_utf8() {
        let f = Frame {
            payload: b"ab\xff".to_vec(),
            ..frame("t")
        };
        assert_eq!(f.payload_json(), Err(CodecError::PayloadNotUtf8(2)));
    }

    #[test]
    fn several_frames_concatenated() {
        let frames = vec![
            frame("a"),
            Frame {
                trace_id: Some([3; 16]),
                ..frame("b")
            },
            frame("c"),
        ];
        let mut bytes = Vec::new();
        for f in &frames {
            encode_frame(f, &mut bytes).unwrap();
        }
        assert_eq!(decode_frames(&bytes), Ok(frames));
        assert_eq!(decode_frames(&[]), Ok(vec![]));
    }

    #[test]
    fn encode_rejects_oversized_fields() {
        let long = "x".repeat(usize::from(u16::MAX) + 1);
        let mut out = vec![1, 2, 3];
        let err = encode_frame(&frame(&long), &mut out).unwrap_err();
        assert_eq!(err, CodecError::TxnIdTooLong(65536));
        assert_eq!(
            err.to_string(),
            "transactionId is 65536 bytes (maximum 65535)"
        );
        let f = Frame {
            producer_sub: Some(long),
            ..frame("t")
        };
        assert_eq!(
            encode_frame(&f, &mut out),
            Err(CodecError::ProducerSubTooLong(65536))
        );
        assert_eq!(out, vec![1, 2, 3], "output untouched on error");
        let max = "y".repeat(usize::from(u16::MAX));
        round_trip(&Frame {
            producer_sub: Some(max.clone()),
            ..frame(&max)
        });
    }

    #[test]
    fn rejects_body_shorter_than_19() {
        let mut bytes = encode(&frame("a"));
        bytes.extend_from_slice(&raw(&[0; 12]));
        let err = decode_frames(&bytes).unwrap_err();
        assert_eq!(err, CodecError::BodyTooShort { frame: 1, len: 12 });
        assert_eq!(
            err.to_string(),
            "corrupt segment: frame 1 body is 12 bytes (minimum 19)"
        );
        assert!(decode_frames(&raw(&[])).is_err());
    }

    #[test]
    fn rejects_truncated_length_prefix() {
        let mut bytes = encode(&frame("a"));
        let first = bytes.len();
        bytes.extend_from_slice(&[5, 0]);
        let err = decode_frames(&bytes).unwrap_err();
        assert_eq!(err, CodecError::Truncated { offset: first });
        assert_eq!(
            err.to_string(),
            format!("corrupt segment: truncated frame at byte {first}")
        );
        assert_eq!(
            decode_frames(&[0]),
            Err(CodecError::Truncated { offset: 0 })
        );
    }

    #[test]
    fn rejects_truncated_body() {
        let bytes = encode(&frame("abc"));
        for cut in 4..bytes.len() {
            assert_eq!(
                decode_frames(&bytes[..cut]),
                Err(CodecError::Truncated { offset: 0 })
            );
        }
        assert_eq!(
            decode_frames(&[0xff, 0xff, 0xff, 0xff, 0]),
            Err(CodecError::Truncated { offset: 0 })
        );
    }

    #[test]
    fn rejects_trailing_bytes_after_last_frame() {
        // Bytes after the last complete frame can never form a frame of their own.
        for extra in [&[0u8][..], &[1, 2, 3], &[19, 0, 0, 0, 0]] {
            let mut bytes = encode(&frame("a"));
            let end = bytes.len();
            bytes.extend_from_slice(extra);
            assert_eq!(
                decode_frames(&bytes),
                Err(CodecError::Truncated { offset: end })
            );
        }
    }

    #[test]
    fn rejects_txn_len_overrunning_body() {
        let mut body = vec![0u8];
        body.extend_from_slice(&[1; 16]);
        body.extend_from_slice(&[10, 0, b'a', b'b']); // claims 10 bytes, has 2
        let err = decode_frames(&raw(&body)).unwrap_err();
        assert_eq!(
            err,
            CodecError::FieldOverrun {
                frame: 0,
                field: "transactionId"
            }
        );
        assert_eq!(
            err.to_string(),
            "corrupt segment: frame 0 transactionId overruns its body"
        );
    }

    #[test]
    fn rejects_missing_trace_and_producer_sub() {
        // Flag 1 set but only 19 bytes of body: the trace id cannot fit.
        let mut body = vec![FLAG_TRACE];
        body.extend_from_slice(&[0; 18]);
        let err = decode_frames(&raw(&body)).unwrap_err();
        assert_eq!(
            err,
            CodecError::FieldOverrun {
                frame: 0,
                field: "trace id"
            }
        );
        // Flag 2 set but the body ends right after the transactionId.
        body[0] = FLAG_PRODUCER_SUB;
        let err = decode_frames(&raw(&body)).unwrap_err();
        assert_eq!(
            err,
            CodecError::FieldOverrun {
                frame: 0,
                field: "producer subject"
            }
        );
    }

    #[test]
    fn rejects_bad_utf8_txn_id() {
        let mut body = vec![0u8];
        body.extend_from_slice(&[1; 16]);
        body.extend_from_slice(&[2, 0, 0xc3, 0x28]);
        let err = decode_frames(&raw(&body)).unwrap_err();
        assert_eq!(
            err,
            CodecError::BadUtf8 {
                frame: 0,
                field: "transactionId"
            }
        );
        assert_eq!(
            err.to_string(),
            "corrupt segment: frame 0 transactionId is not valid UTF-8"
        );
    }

    #[test]
    fn rejects_bad_utf8_producer_sub() {
        let mut bytes = encode(&Frame {
            producer_sub: Some("ok".into()),
            ..frame("t")
        });
        let at = bytes.len() - br#"{"a":1}"#.len() - 1;
        bytes[at] = 0xff;
        let err = decode_frames(&bytes).unwrap_err();
        assert_eq!(
            err,
            CodecError::BadUtf8 {
                frame: 0,
                field: "producer subject"
            }
        );
    }

    #[test]
    fn rejects_unknown_flag_bits() {
        for flags in [8u8, 0x10, 0x80, 0xff] {
            let mut bytes = encode(&frame("t"));
            bytes[4] = flags;
            let err = decode_frames(&bytes).unwrap_err();
            assert_eq!(err, CodecError::UnknownFlags { frame: 0, flags });
        }
        let err = CodecError::UnknownFlags {
            frame: 2,
            flags: 0x09,
        };
        assert_eq!(
            err.to_string(),
            "corrupt segment: frame 2 has unknown flag bits 0x09"
        );
    }
}
