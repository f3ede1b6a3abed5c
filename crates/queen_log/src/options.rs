//! Queue options (docs/http-api.md, "Strict bodies"): every key `configure` takes, what
//! each means here, and the one check both halves apply: the broker before it calls
//! `queen.configure_queue_v1`, the extension inside it (`queen.check_queue_options_v1`),
//! so a psql caller cannot store an option that would be ignored either. Every key is
//! enforced or refused, never stored and ignored; what each one does here, and where that
//! differs from Queen, is docs/decisions.md, "Queue options".

use serde::Deserialize;
use serde_json::{json, Map, Value};

/// What configure does with an option key.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Rule {
    /// Read by `queen.configure_queue_v1` and enforced: an integer >= 0.
    Int,
    /// Read and enforced: a boolean.
    Bool,
    /// `retentionEnabled`: retention here is its two windows, so `true` (or null) is what
    /// happens anyway, and `false` only when the same body sets both windows to 0.
    RetentionSwitch,
}

/// Every option key configure takes: the list of Queen's routes/configure.cpp, each
/// enforced. A key not listed is refused; null means absent.
pub const OPTIONS: [(&str, Rule); 16] = [
    ("leaseTime", Rule::Int),
    ("retryLimit", Rule::Int),
    ("retentionSeconds", Rule::Int),
    ("completedRetentionSeconds", Rule::Int),
    ("dedupWindowSeconds", Rule::Int),
    ("delayedProcessing", Rule::Int),
    ("deadLetterQueue", Rule::Bool),
    ("dlqAfterMaxRetries", Rule::Bool),
    // Enforced by push (the extension refuses a plaintext frame into such a queue) and
    // by the broker, which seals payloads with QUEEN_ENCRYPTION_KEY (crate::encryption).
    ("encryptionEnabled", Rule::Bool),
    ("retentionEnabled", Rule::RetentionSwitch),
    // The order namespace and task pops try queues in, higher first (the broker).
    ("priority", Rule::Int),
    // Seconds a partition stays unserved after its last push (pop's claim).
    ("windowBuffer", Rule::Int),
    // A cap on the queue's unconsumed messages; a push past it is refused (push).
    ("maxSize", Rule::Int),
    // Seconds a message may wait; run_maintenance retires older ones, counted.
    ("maxWaitTimeSeconds", Rule::Int),
    // Milliseconds a failed ack holds the redelivery when the ack names no delay.
    ("retryDelay", Rule::Int),
    // Seconds after which a message is never delivered (pop retires it, counted); 0, and
    // absent, mean none: Queen's default of 3600 is not applied to a queue that did not
    // ask for it.
    ("ttl", Rule::Int),
];

/// A refused option: the field path (`options.<key>`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub field: String,
    pub message: String,
}

fn refusal(key: &str, message: String) -> Refusal {
    Refusal {
        field: format!("options.{key}"),
        message,
    }
}

/// A JSON integer, or an integral float (`30.0`: some clients send every number as a
/// float); anything else, including `1.5` and strings, is None.
pub fn json_integer(v: &Value) -> Option<i64> {
    let n = v.as_number()?;
    n.as_i64().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
            .map(|f| f as i64)
    })
}

/// A queue's `priority` as configure stored it (an integer >= 0, [`check`]ed); 0 when
/// absent. Namespace and task pops order by it; the status view shows it.
pub fn priority(stored: &Value) -> i64 {
    #[derive(serde::Deserialize)]
    struct Stored {
        priority: Option<Value>,
    }
    Stored::deserialize(stored)
        .ok()
        .and_then(|s| s.priority)
        .as_ref()
        .and_then(json_integer)
        .unwrap_or(0)
}

/// The options a broker checks itself before storing them (its lease cap, whether it can
/// seal payloads), typed from what [`normalized`] returned.
#[derive(serde::Deserialize, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Requested {
    pub lease_time: Option<i64>,
    pub encryption_enabled: Option<bool>,
}

impl Requested {
    /// Never fails on a [`normalized`] map (its values are checked there); anything else
    /// is a refusal naming `options`.
    pub fn of(stored: &Value) -> Result<Requested, Refusal> {
        use serde::Deserialize;
        Requested::deserialize(stored).map_err(|e| Refusal {
            field: "options".into(),
            message: format!("options: {e}"),
        })
    }
}

/// The options as stored: every key verbatim, except that the implemented ones are
/// checked and written in the canonical form the SQL casts expect (`30.0` -> `30`). A key
/// not in OPTIONS, or a value of the wrong type or range, is refused naming
/// `options.<key>`.
pub fn normalized(o: &Map<String, Value>) -> Result<Map<String, Value>, Refusal> {
    let mut out = o.clone();
    for k in o.keys() {
        let Some((_, rule)) = OPTIONS.iter().find(|(name, _)| name == k) else {
            return Err(refusal(
                k,
                format!(
                    "options.{k} is not a queue option this broker implements (known: {}); \
                     refused, nothing was changed",
                    OPTIONS.map(|(n, _)| n).join(", ")
                ),
            ));
        };
        match rule {
            Rule::Int => {
                if let Some(n) = int_opt(o, k)? {
                    out.insert(k.clone(), json!(n));
                }
            }
            Rule::Bool => {
                bool_opt(o, k)?;
            }
            Rule::RetentionSwitch => retention_switch(o)?,
        }
    }
    Ok(out)
}

/// `retentionEnabled: false` means "keep everything": true here only when both retention
/// windows are set to 0 in the same body (a stored window would otherwise still apply).
fn retention_switch(o: &Map<String, Value>) -> Result<(), Refusal> {
    if bool_opt(o, "retentionEnabled")? != Some(false) {
        return Ok(());
    }
    let zero = |k: &str| int_opt(o, k).ok().flatten() == Some(0);
    if zero("retentionSeconds") && zero("completedRetentionSeconds") {
        return Ok(());
    }
    Err(refusal(
        "retentionEnabled",
        "options.retentionEnabled = false needs retentionSeconds: 0 and \
         completedRetentionSeconds: 0 in the same body: retention here is those two \
         windows, so a window set now or earlier would still apply. Refused, nothing was changed"
            .into(),
    ))
}

/// An integer option; null means absent. Integral floats (`30.0`) are accepted.
fn int_opt(o: &Map<String, Value>, key: &str) -> Result<Option<i32>, Refusal> {
    let bad = || refusal(key, format!("options.{key} must be a non-negative integer"));
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Number(_)) => {
            let v = json_integer(v).ok_or_else(bad)?;
            i32::try_from(v)
                .ok()
                .filter(|v| *v >= 0)
                .map(Some)
                .ok_or_else(bad)
        }
        Some(_) => Err(bad()),
    }
}

fn bool_opt(o: &Map<String, Value>, key: &str) -> Result<Option<bool>, Refusal> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(refusal(key, format!("options.{key} must be a boolean"))),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn priority_reads_the_stored_integer_or_zero() {
        use serde_json::json;
        assert_eq!(
            super::priority(&json!({"priority": 10, "leaseTime": 30})),
            10
        );
        assert_eq!(super::priority(&json!({"priority": 3.0})), 3);
        assert_eq!(super::priority(&json!({"leaseTime": 30})), 0);
        assert_eq!(super::priority(&json!({"priority": "high"})), 0);
        assert_eq!(super::priority(&json!(null)), 0);
    }

    use super::*;

    fn check(v: Value) -> Result<Map<String, Value>, Refusal> {
        normalized(v.as_object().unwrap())
    }

    #[test]
    fn requested_reads_the_checked_options_typed() {
        let o =
            check(json!({"leaseTime": 30.0, "encryptionEnabled": true, "priority": 2})).unwrap();
        let r = Requested::of(&Value::Object(o)).unwrap();
        assert_eq!(r.lease_time, Some(30));
        assert_eq!(r.encryption_enabled, Some(true));
        let none = Requested::of(&json!({"encryptionEnabled": null})).unwrap();
        assert_eq!(none, Requested::default());
    }

    #[test]
    fn implemented_options_are_normalized_and_neutral_ones_kept() {
        let o =
            check(json!({"leaseTime": 30.0, "priority": 0, "encryptionEnabled": false})).unwrap();
        assert_eq!(o["leaseTime"], json!(30));
        assert_eq!(o["priority"], json!(0));
    }

    #[test]
    fn unknown_keys_and_non_neutral_values_are_refused_naming_them() {
        assert_eq!(
            check(json!({"colour": 1})).unwrap_err().field,
            "options.colour"
        );
        assert_eq!(check(json!({"ttl": -60})).unwrap_err().field, "options.ttl");
        assert_eq!(
            check(json!({"maxSize": "big"})).unwrap_err().field,
            "options.maxSize"
        );
        assert_eq!(
            check(json!({"encryptionEnabled": "yes"}))
                .unwrap_err()
                .field,
            "options.encryptionEnabled"
        );
        assert!(check(json!({"encryptionEnabled": true})).is_ok());
        assert_eq!(
            check(json!({"leaseTime": -1})).unwrap_err().field,
            "options.leaseTime"
        );
        assert_eq!(
            check(json!({"deadLetterQueue": "yes"})).unwrap_err().field,
            "options.deadLetterQueue"
        );
    }

    #[test]
    fn every_queen_option_is_accepted_with_any_non_negative_value() {
        let o = check(
            json!({"leaseTime": 60, "maxSize": 1000, "priority": 10, "retryLimit": 5,
                             "ttl": 60, "retryDelay": 1500.0, "windowBuffer": 2,
                             "maxWaitTimeSeconds": 30}),
        )
        .unwrap();
        assert_eq!(o["maxSize"], json!(1000));
        assert_eq!(o["retryDelay"], json!(1500));
        assert_eq!(OPTIONS.len(), 16);
    }

    #[test]
    fn retention_off_needs_both_windows_zero_in_the_same_body() {
        assert!(check(json!({"retentionEnabled": false})).is_err());
        assert!(check(json!({"retentionEnabled": false, "retentionSeconds": 0, "completedRetentionSeconds": 0})).is_ok());
        assert!(check(json!({"retentionEnabled": true})).is_ok());
    }

    #[test]
    fn integers_may_come_as_integral_floats_only() {
        assert_eq!(json_integer(&json!(30.0)), Some(30));
        assert_eq!(json_integer(&json!(1.5)), None);
        assert_eq!(json_integer(&json!("3")), None);
    }
}
