/**
 * Streaming test suite — re-export all test modules so run.js can pull
 * them in via a single namespace import.
 *
 * Test categories:
 *   operators.js  — basic stateless ops
 *   tumbling.js   — tumbling windows + grace + idle flush
 *   sliding.js    — sliding/hopping windows
 *   session.js    — session windows
 *   cron.js       — wall-clock-aligned windows (every: shorthand)
 *   eventTime.js  — event-time + watermarks + late-event handling
 *   recovery.js   — config_hash mismatch + reset + mid-stream resume
 *   throughput.js — multi-partition / many-window throughput
 *   combined.js   — full pipelines + concurrent streams
 */

export * from './operators.js'
export * from './tumbling.js'
export * from './sliding.js'
export * from './session.js'
export * from './cron.js'
export * from './eventTime.js'
export * from './recovery.js'
export * from './throughput.js'
export * from './combined.js'
