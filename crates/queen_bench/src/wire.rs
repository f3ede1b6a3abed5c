//! The client side of the broker's HTTP wire, typed: the load generators run on the same
//! two cores as the broker and PostgreSQL, so every cycle they spend building or walking
//! `serde_json::Value` trees is taken from the system under test. Unknown fields of an
//! answer are skipped, not stored.

use serde::{Deserialize, Serialize};

/// `POST /api/v1/push` body.
#[derive(Serialize)]
pub struct PushBody<'a, P: Serialize = BenchPayload> {
    pub items: Vec<PushItem<'a, P>>,
}

/// One pushed message; the payload is section 3's struct or, for the peer comparison, a
/// fixed-size JSON text (`&RawValue`) written as is.
#[derive(Serialize)]
pub struct PushItem<'a, P: Serialize = BenchPayload> {
    pub queue: &'a str,
    pub partition: &'a str,
    pub payload: P,
}

/// The payload every generated message carries.
#[derive(Serialize)]
pub struct BenchPayload {
    pub producer: usize,
    pub n: u64,
    pub body: &'static str,
}

/// One item of a push answer: only its status is read.
#[derive(Deserialize)]
pub struct Pushed {
    pub status: String,
}

/// A pop answer: the lease and, per message, what an ack needs.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Popped {
    pub lease_id: Option<String>,
    #[serde(default)]
    pub messages: Vec<PoppedMsg>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoppedMsg {
    pub transaction_id: String,
    pub partition_id: String,
}

/// `POST /api/v1/ack/batch` body.
#[derive(Serialize)]
pub struct AckBatch<'a> {
    pub acknowledgments: Vec<AckItem<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AckItem<'a> {
    pub transaction_id: &'a str,
    pub partition_id: &'a str,
    pub lease_id: Option<&'a str>,
    pub status: &'static str,
}

/// One item of an ack answer: whether it succeeded.
#[derive(Deserialize)]
pub struct Acked {
    pub success: bool,
}

/// A queue-level pop answer as both Queen's server and the broker give it (section 14):
/// Queen names the partition once per answer (`partitionId`, and `leaseId` "" under
/// autoAck), the broker on every message as well; an empty pop is 204 from either (Queen:
/// with a body) or 200 with no messages.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct VsPopped {
    /// The partition's name (both servers serve one partition per pop here).
    pub partition: Option<String>,
    pub lease_id: Option<String>,
    pub partition_id: Option<String>,
    #[serde(default)]
    pub messages: Vec<VsMsg>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VsMsg {
    pub transaction_id: String,
    pub partition_id: Option<String>,
}
