// #[pg_test]s for the ack contract (§6–§10); added with the ack issue.
