//! Faults: timeouts, killed CLIs, parallel runs.
