//! The DLQ rules both halves apply: which error text a dead-lettered frame is filed with.

use crate::ack::Status;

/// The error text of a DLQ row filed by an ack's dlq hand-off (broker.md §2 step 5,
/// contract §9): the error of the head signal that chose the branch, else the first
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

#[cfg(test)]
mod tests {
    use super::*;
    use Status::*;

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
