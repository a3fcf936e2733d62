//! Compiles `proto/pxfleet/v1/*.proto` with protox (pure Rust, no system `protoc`) and generates prost
//! messages plus tonic clients and servers with tonic-prost-build.

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "pxfleet/v1/common.proto",
    "pxfleet/v1/agent.proto",
    "pxfleet/v1/fleet.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("proto");
    println!("cargo:rerun-if-changed={}", root.display());
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={}", root.join(proto).display());
    }
    let fds = protox::compile(PROTOS, [&root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // No `XClient::connect(url)` constructors: every connection goes through pxfleet-tls (mutual TLS), and
        // the generated constructor would clash with the `Connect` RPC's client method.
        .build_transport(false)
        // `Secret` gets a hand-written, redacting `Debug` in lib.rs.
        .skip_debug([".pxfleet.v1.Secret"])
        .compile_fds(fds)?;
    Ok(())
}
