//! Property tests for the frame and segment codec (docs/contract.md §3): every encodable frame
//! list round-trips, and decoding arbitrary bytes returns `Ok` or `Err` without panicking.

use proptest::prelude::*;
use queen_log::frame::{decode_frames, encode_frame, Frame};
use queen_log::hash::{split_hashes, txn_hash};
use queen_log::segment::{decode_segment, encode_segment, segment_hashes};

/// Arbitrary frames: any flags combination, unicode strings, arbitrary payload bytes.
fn arb_frame() -> impl Strategy<Value = Frame> {
    (
        any::<[u8; 16]>(),
        proptest::option::of(any::<[u8; 16]>()),
        ".{0,40}",
        proptest::option::of(".{0,20}"),
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..200),
    )
        .prop_map(
            |(message_id, trace_id, transaction_id, producer_sub, encrypted, payload)| Frame {
                message_id,
                trace_id,
                transaction_id,
                producer_sub,
                encrypted,
                payload,
            },
        )
}

fn arb_frames() -> impl Strategy<Value = Vec<Frame>> {
    proptest::collection::vec(arb_frame(), 0..8)
}

proptest! {
    #[test]
    fn segment_round_trips(frames in arb_frames()) {
        let blob = encode_segment(&frames).unwrap();
        prop_assert_eq!(decode_segment(&blob).unwrap(), frames);
    }

    #[test]
    fn frame_concatenation_round_trips(frames in arb_frames()) {
        let mut bytes = Vec::new();
        for f in &frames {
            encode_frame(f, &mut bytes).unwrap();
        }
        prop_assert_eq!(decode_frames(&bytes).unwrap(), frames);
    }

    #[test]
    fn segment_hashes_match_frames(frames in arb_frames()) {
        let hs = split_hashes(&segment_hashes(&frames)).unwrap();
        let expected: Vec<_> = frames.iter().map(|f| txn_hash(&f.transaction_id)).collect();
        prop_assert_eq!(hs, expected);
    }

    #[test]
    fn truncated_frame_streams_are_rejected(frames in arb_frames(), cut in any::<prop::sample::Index>()) {
        let mut bytes = Vec::new();
        for f in &frames {
            encode_frame(f, &mut bytes).unwrap();
        }
        prop_assume!(!bytes.is_empty());
        let at = cut.index(bytes.len());
        // Cutting inside the last frame must always be detected; earlier cuts may happen
        // to land on a frame boundary and decode as a prefix of the frames.
        match decode_frames(&bytes[..at]) {
            Ok(prefix) => prop_assert!(prefix.len() < frames.len() && prefix[..] == frames[..prefix.len()]),
            Err(e) => prop_assert!(e.to_string().starts_with("corrupt segment: ")),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn decode_frames_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_frames(&bytes);
    }

    #[test]
    fn decode_segment_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_segment(&bytes);
    }

    #[test]
    fn decode_segment_never_panics_on_mangled_blobs(
        frames in arb_frames(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut blob = encode_segment(&frames).unwrap();
        for (i, x) in flips {
            let at = i.index(blob.len());
            blob[at] ^= x;
        }
        let _ = decode_segment(&blob);
    }

    #[test]
    fn decode_frames_never_panics_on_zstd_content(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        // Arbitrary content inside a valid zstd frame reaches the frame decoder.
        let blob = zstd::encode_all(&bytes[..], 1).unwrap();
        let via_segment = decode_segment(&blob);
        prop_assert_eq!(via_segment, decode_frames(&bytes));
    }
}
