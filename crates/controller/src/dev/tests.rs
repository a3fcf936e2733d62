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

#[test]
fn dev_nodes_hand_out_disjoint_dhcp_ranges_of_one_subnet() {
    #[derive(serde::Deserialize)]
    struct Dhcp {
        first: std::net::Ipv4Addr,
        last: std::net::Ipv4Addr,
        prefix: u8,
    }
    #[derive(serde::Deserialize)]
    struct Ov {
        dhcp: Dhcp,
    }
    let ranges: Vec<(u32, u32)> = (0..32)
        .map(|i| {
            let ov: Ov = toml::from_str(&dev_dhcp_overrides(i)).unwrap();
            assert_eq!(ov.dhcp.prefix, 16);
            let (a, b) = (u32::from(ov.dhcp.first), u32::from(ov.dhcp.last));
            assert_eq!(
                a >> 16,
                u32::from(std::net::Ipv4Addr::new(10, 99, 0, 0)) >> 16,
                "node {i}"
            );
            assert_eq!(b >> 16, a >> 16, "node {i}");
            assert!(b - a + 1 >= 1000, "node {i}: {} addresses", b - a + 1);
            (a, b)
        })
        .collect();
    for w in ranges.windows(2) {
        assert!(w[0].1 < w[1].0, "ranges overlap: {w:?}");
    }
}
