//! Workspace-level integration and end-to-end test harness.
