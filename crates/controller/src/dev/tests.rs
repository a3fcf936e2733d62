//! Tests of dev mode: options, the files it writes, its fleet.

use super::*;

#[test]
fn node_names_start_at_the_prd_node() {
    assert_eq!(node_names(3), ["mk33", "mk34", "mk35"]);
}

#[test]
fn missing_binary_says_how_to_build_it() {
    let args = DevArgs {
        nodes: 1,
        data_dir: None,
        listen: "127.0.0.1:0".parse().unwrap(),
        pvesim: Some(PathBuf::from("/nonexistent/pvesim")),
        pxagent: None,
        templates: vec![],
    };
    let e = args.resolve().unwrap_err().to_string();
    assert!(e.contains("/nonexistent/pvesim"), "{e}");
    assert!(e.contains("cargo build --bins"), "{e}");
}

#[test]
fn listens_on_loopback_only() {
    let args = DevArgs {
        nodes: 1,
        data_dir: None,
        listen: "0.0.0.0:7443".parse().unwrap(),
        pvesim: None,
        pxagent: None,
        templates: vec![],
    };
    let e = args.resolve().unwrap_err().to_string();
    assert!(e.contains("0.0.0.0:7443") && e.contains("127.0.0.1"), "{e}");
}

#[test]
fn template_names_must_be_plain_file_names() {
    let exe = std::env::current_exe().unwrap();
    let args = DevArgs {
        nodes: 1,
        data_dir: None,
        listen: "127.0.0.1:0".parse().unwrap(),
        pvesim: Some(exe.clone()),
        pxagent: Some(exe),
        templates: vec!["../etc/passwd".into()],
    };
    let e = args.resolve().unwrap_err().to_string();
    assert!(e.contains("../etc/passwd"), "{e}");
}
