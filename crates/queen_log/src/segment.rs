//! Segment blobs (docs/contract.md §3): exactly one zstd frame over the concatenated frames,
//! plus the packed transactionId hashes stored alongside a segment.
//!
//! Decoding treats the blob as untrusted: zstd errors, bytes after the zstd frame and
//! decompressed sizes beyond [`MAX_SEGMENT_BYTES`] are all reported as corruption, and
//! nothing panics.

use std::io::Read;

use crate::frame::{decode_frames, encode_frame, CodecError, Frame};
use crate::hash::txn_hash;

/// zstd level used by [`encode_segment`]: a good speed/ratio balance for JSON payloads.
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;

/// Cap on a segment's decompressed size, so a small hostile blob (a "zstd bomb")
/// cannot make the decoder allocate without bound.
pub const MAX_SEGMENT_BYTES: usize = 256 << 20;

/// Encodes frames into a segment blob at [`DEFAULT_ZSTD_LEVEL`].
pub fn encode_segment(frames: &[Frame]) -> Result<Vec<u8>, CodecError> {
    encode_segment_level(frames, DEFAULT_ZSTD_LEVEL)
}

/// Encodes frames into a segment blob at the given zstd level (zstd clamps it to its
/// supported range).
pub fn encode_segment_level(frames: &[Frame], level: i32) -> Result<Vec<u8>, CodecError> {
    let mut raw = Vec::new();
    for f in frames {
        encode_frame(f, &mut raw)?;
    }
    compress(&raw, level)
}

thread_local! {
    /// One compression and one decompression context per thread: creating them per
    /// segment showed up in the broker's profile.
    static COMPRESSOR: std::cell::RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> =
        const { std::cell::RefCell::new(None) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

fn compress(raw: &[u8], level: i32) -> Result<Vec<u8>, CodecError> {
    COMPRESSOR.with(|slot| {
        let mut slot = slot.borrow_mut();
        if slot.as_ref().is_none_or(|(l, _)| *l != level) {
            *slot = Some((
                level,
                zstd::bulk::Compressor::new(level).map_err(zstd_error)?,
            ));
        }
        let (_, c) = slot.as_mut().expect("just set");
        c.compress(raw).map_err(zstd_error)
    })
}

/// Decodes a segment blob back into its frames. The blob must be exactly one zstd frame
/// whose content is a well-formed frame stream of at most [`MAX_SEGMENT_BYTES`].
pub fn decode_segment(blob: &[u8]) -> Result<Vec<Frame>, CodecError> {
    let zstd_len = zstd::zstd_safe::find_frame_compressed_size(blob)
        .map_err(|code| CodecError::Zstd(zstd::zstd_safe::get_error_name(code).to_owned()))?;
    if zstd_len < blob.len() {
        return Err(CodecError::TrailingBytes(blob.len() - zstd_len));
    }
    decode_frames(&decompress_capped(&blob[..zstd_len])?)
}

/// Decompresses one zstd frame of at most [`MAX_SEGMENT_BYTES`]. A frame whose header
/// states a size within the cap is decompressed in one call into exactly that much room
/// (a frame that lies about its size fails there); anything else is streamed.
fn decompress_capped(zstd_frame: &[u8]) -> Result<Vec<u8>, CodecError> {
    match zstd::zstd_safe::get_frame_content_size(zstd_frame) {
        Ok(Some(n)) if n <= MAX_SEGMENT_BYTES as u64 => DECOMPRESSOR.with(|slot| {
            let mut slot = slot.borrow_mut();
            if slot.is_none() {
                *slot = Some(zstd::bulk::Decompressor::new().map_err(zstd_error)?);
            }
            let d = slot.as_mut().expect("just set");
            d.decompress(zstd_frame, n as usize).map_err(zstd_error)
        }),
        _ => decompress_streaming(zstd_frame),
    }
}

/// Streams one zstd frame through a reader limited to one byte past the cap, so memory
/// use is bounded by the cap rather than by what the blob's header claims.
fn decompress_streaming(zstd_frame: &[u8]) -> Result<Vec<u8>, CodecError> {
    let decoder = zstd::stream::read::Decoder::with_buffer(zstd_frame).map_err(zstd_error)?;
    let mut out = Vec::new();
    let limit = MAX_SEGMENT_BYTES as u64 + 1;
    decoder
        .single_frame()
        .take(limit)
        .read_to_end(&mut out)
        .map_err(zstd_error)?;
    if out.len() > MAX_SEGMENT_BYTES {
        return Err(CodecError::TooLarge(MAX_SEGMENT_BYTES));
    }
    Ok(out)
}

/// Wraps a zstd (I/O-shaped) error as segment corruption.
fn zstd_error(e: std::io::Error) -> CodecError {
    CodecError::Zstd(e.to_string())
}

/// Decodes a segment that must hold exactly `msg_count` frames (its row's count).
pub fn decode_segment_exact(blob: &[u8], msg_count: usize) -> Result<Vec<Frame>, CodecError> {
    let frames = decode_segment(blob)?;
    if frames.len() != msg_count {
        return Err(CodecError::FrameCountMismatch {
            expected: msg_count,
            found: frames.len(),
        });
    }
    Ok(frames)
}

/// Checks a segment as pushed: it decodes, holds `hashes.len() / 16` frames, and frame
/// `i`'s transactionId hashes to hash `i`. A segment that passes can always be served.
/// Returns its frames (decoded anyway), for the checks push makes of their content.
pub fn verify_segment(blob: &[u8], hashes: &[u8]) -> Result<Vec<Frame>, CodecError> {
    let frames = decode_segment_exact(blob, hashes.len() / 16)?;
    for (i, (f, h)) in frames.iter().zip(hashes.chunks_exact(16)).enumerate() {
        if txn_hash(&f.transaction_id) != h {
            return Err(CodecError::HashMismatch { frame: i });
        }
    }
    Ok(frames)
}

/// The packed hashes of a segment: `txn_hash` of each frame's transactionId, 16 bytes
/// each, in frame order, so hash `i` always belongs to frame `i`.
pub fn segment_hashes(frames: &[Frame]) -> Vec<u8> {
    let mut out = Vec::with_capacity(frames.len() * 16);
    for f in frames {
        out.extend_from_slice(&txn_hash(&f.transaction_id));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::split_hashes;

    fn frame(txn: &str, payload: &str) -> Frame {
        Frame {
            message_id: [txn.len() as u8; 16],
            trace_id: None,
            transaction_id: txn.to_owned(),
            producer_sub: None,
            encrypted: false,
            payload: payload.as_bytes().to_vec(),
        }
    }

    fn sample() -> Vec<Frame> {
        vec![
            frame("a", r#"{"n":1}"#),
            Frame {
                trace_id: Some([5; 16]),
                producer_sub: Some("svc".into()),
                ..frame("bb", "")
            },
            Frame {
                encrypted: true,
                ..frame("ccc", "c2VjcmV0")
            },
        ]
    }

    #[test]
    fn exact_decoding_checks_the_frame_count() {
        let blob = encode_segment(&sample()).unwrap();
        let n = sample().len();
        assert_eq!(decode_segment_exact(&blob, n).unwrap(), sample());
        assert_eq!(
            decode_segment_exact(&blob, n + 1),
            Err(CodecError::FrameCountMismatch {
                expected: n + 1,
                found: n
            })
        );
    }

    #[test]
    fn verify_checks_count_and_every_hash() {
        let frames = sample();
        let blob = encode_segment(&frames).unwrap();
        let hashes = segment_hashes(&frames);
        assert_eq!(verify_segment(&blob, &hashes), Ok(frames.clone()));
        let mut wrong = hashes.clone();
        wrong[16] ^= 1;
        assert_eq!(
            verify_segment(&blob, &wrong).map(|_| ()),
            Err(CodecError::HashMismatch { frame: 1 })
        );
        assert!(matches!(
            verify_segment(&blob, &hashes[16..]),
            Err(CodecError::FrameCountMismatch { .. })
        ));
        assert!(verify_segment(b"\x00", &hashes[..16]).is_err());
    }

    #[test]
    fn round_trip_default_level() {
        let frames = sample();
        let blob = encode_segment(&frames).unwrap();
        assert_eq!(decode_segment(&blob), Ok(frames));
    }

    #[test]
    fn round_trip_other_levels_and_empty() {
        for level in [1, 3, 19] {
            let blob = encode_segment_level(&sample(), level).unwrap();
            assert_eq!(decode_segment(&blob), Ok(sample()));
        }
        assert_eq!(decode_segment(&encode_segment(&[]).unwrap()), Ok(vec![]));
    }

    #[test]
    fn blob_is_one_zstd_frame_over_concatenated_frames() {
        let frames = sample();
        let mut raw = Vec::new();
        for f in &frames {
            encode_frame(f, &mut raw).unwrap();
        }
        let blob = encode_segment(&frames).unwrap();
        assert_eq!(zstd::decode_all(&blob[..]).unwrap(), raw);
        // A blob produced by any conforming zstd encoder decodes the same.
        let other = zstd::encode_all(&raw[..], 1).unwrap();
        assert_eq!(decode_segment(&other), Ok(frames));
    }

    #[test]
    fn encode_propagates_frame_errors() {
        let long = "x".repeat(70_000);
        let err = encode_segment(&[frame(&long, "")]).unwrap_err();
        assert_eq!(err, CodecError::TxnIdTooLong(70_000));
    }

    #[test]
    fn rejects_bad_zstd_bytes() {
        for bad in [
            &b""[..],
            b"not zstd at all",
            &[0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0],
        ] {
            let err = decode_segment(bad).unwrap_err();
            assert!(matches!(err, CodecError::Zstd(_)), "{bad:?} gave {err:?}");
            assert!(
                err.to_string().starts_with("corrupt segment: zstd: "),
                "{err}"
            );
        }
    }

    #[test]
    fn rejects_truncated_zstd_frame() {
        let blob = encode_segment(&sample()).unwrap();
        for cut in 0..blob.len() {
            assert!(decode_segment(&blob[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn rejects_trailing_bytes_after_zstd_frame() {
        let mut blob = encode_segment(&sample()).unwrap();
        blob.extend_from_slice(&[1, 2, 3, 4, 5]);
        let err = decode_segment(&blob).unwrap_err();
        assert_eq!(err, CodecError::TrailingBytes(5));
        assert_eq!(err.to_string(), "corrupt segment: 5 trailing bytes");
        // A second zstd frame is trailing data too: a blob is exactly one frame.
        let mut two = encode_segment(&sample()).unwrap();
        let second = encode_segment(&sample()).unwrap();
        two.extend_from_slice(&second);
        assert_eq!(
            decode_segment(&two),
            Err(CodecError::TrailingBytes(second.len()))
        );
    }

    #[test]
    fn rejects_zstd_of_corrupt_frames() {
        let short = zstd::encode_all(&[12u8, 0, 0, 0][..], 3).unwrap();
        assert_eq!(
            decode_segment(&short),
            Err(CodecError::Truncated { offset: 0 })
        );
        let mut body = vec![0u8; 16];
        body.splice(0..0, [12u8, 0, 0, 0]);
        let blob = zstd::encode_all(&body[..], 3).unwrap();
        assert_eq!(
            decode_segment(&blob),
            Err(CodecError::BodyTooShort { frame: 0, len: 12 })
        );
    }

    #[test]
    fn rejects_oversized_decompression() {
        // Highly compressible: a tiny blob that inflates past the cap.
        let bomb =
            zstd::encode_all(std::io::repeat(0).take(MAX_SEGMENT_BYTES as u64 + 1), 1).unwrap();
        assert!(bomb.len() < 1 << 20);
        assert_eq!(
            decode_segment(&bomb),
            Err(CodecError::TooLarge(MAX_SEGMENT_BYTES))
        );
    }

    #[test]
    fn hashes_follow_frame_order() {
        let frames = sample();
        let packed = segment_hashes(&frames);
        assert_eq!(packed.len(), 48);
        let hs = split_hashes(&packed).unwrap();
        let expected: Vec<_> = frames.iter().map(|f| txn_hash(&f.transaction_id)).collect();
        assert_eq!(hs, expected);
        assert_eq!(&packed[..16], &txn_hash("a"));
        assert!(segment_hashes(&[]).is_empty());
    }
}
