//! The pxfleet.v1 gRPC protocol: prost messages and tonic clients/servers generated from
//! `proto/pxfleet/v1/*.proto` (compiled by protox in `build.rs`, no system `protoc`).
//!
//! - [`v1::agent_service_client`] / [`v1::agent_service_server`]: pxagent <-> pxcontroller (enrolment and the
//!   single bidirectional stream).
//! - [`v1::fleet_service_client`] / [`v1::fleet_service_server`]: pxctl -> pxcontroller.
//!
//! Connecting: there are no generated `XClient::connect(url)` constructors (all traffic is mutual TLS);
//! dial with `pxfleet_tls::connect(url, config)` and wrap the channel, e.g.
//! `AgentServiceClient::new(channel)`. Serve with `pxfleet_tls::serve_tls`.
//!
//! Extending the protocol: add fields with new tag numbers, never renumber or reuse one (reserve removed
//! ones); new RPCs and oneof variants are additive. Sizes carry their unit in the field name, times are
//! `*_unix_ms`, secrets are wrapped in `Secret`.
//!
//! This crate holds generated code only (plus the redacting `Debug` of [`v1::Secret`]); conversions to domain
//! types live in the crates that own those types.

/// Generated code for the `pxfleet.v1` package.
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("pxfleet.v1");

    impl std::fmt::Debug for Secret {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Secret(<redacted>)")
        }
    }
}

/// Protocol revision spoken by this build (`Hello.protocol_version`, `Welcome.protocol_version`).
pub const PROTOCOL_VERSION: u32 = 1;

pub use prost::Message;
