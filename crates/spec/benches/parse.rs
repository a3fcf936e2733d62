//! Parse + validate a generated 10,000-container fleet file (target: < 200 ms).

use criterion::{criterion_group, criterion_main, Criterion};
use pxfleet_spec::{parse_fleet, NoFiles};

/// A fleet of `n` containers using most fields: static addresses, extra interfaces, mount
/// points, tags, labels, startup, features, all distinct where they must be.
pub fn big_fleet(n: usize) -> String {
    let mut s = String::with_capacity(n * 600);
    s.push_str("fleet: bench\ndefaults:\n  template: deb\n  datastore_id: local-zfs\n  features: {nesting: true}\n  dns: {servers: [10.0.0.1], domain: bench.lab}\n");
    s.push_str(
        "templates:\n  deb: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}\ncontainers:\n",
    );
    for i in 0..n {
        let (a, b) = (i / 250, i % 250 + 2);
        s.push_str(&format!(
            "  ct-{i}:\n    vm_id: {}\n    node: node-{}\n    cores: {}\n    memory: {}\n    swap: 512\n    disk_size: {}\n    ip_address: 10.{a}.{b}.10/16\n    gateway: 10.{a}.0.1\n    mac_address: BC:24:11:{:02X}:{:02X}:01\n    vlan_id: {}\n    tags: [bench, t{}]\n    labels: {{role: r{}}}\n    startup: {{order: {}, up_delay: 5}}\n    extra_interfaces:\n      - {{bridge: vmbr1, ip_address: 172.{}.{}.5/24}}\n    mount_points:\n      - {{datastore_id: local-zfs, size: 10, path: /data}}\n",
            1000 + i,
            i % 16,
            1 + i % 8,
            512 + (i % 16) * 256,
            8 + i % 32,
            i / 256,
            i % 256,
            1 + i % 4094,
            i % 10,
            i % 5,
            i % 100,
            16 + i / 250,
            i % 250,
        ));
    }
    s
}

/// A fleet of `n` containers of the DESIGN example's size (eight fields each).
pub fn plain_fleet(n: usize) -> String {
    let mut s = String::with_capacity(n * 200);
    s.push_str("fleet: bench\ndefaults: {template: deb, datastore_id: local-zfs}\n");
    s.push_str(
        "templates:\n  deb: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}\ncontainers:\n",
    );
    for i in 0..n {
        let (a, b) = (i / 250, i % 250 + 2);
        s.push_str(&format!(
            "  ct-{i}:\n    vm_id: {}\n    cores: 2\n    memory: 2048\n    disk_size: 8\n    ip_address: 10.{a}.{b}.10/16\n    gateway: 10.{a}.0.1\n    tags: [web]\n",
            1000 + i
        ));
    }
    s
}

fn bench(c: &mut Criterion) {
    let text = big_fleet(10_000);
    // sanity: the generated file is valid
    let f = parse_fleet("bench.yaml", &text, &NoFiles).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(f.containers.len(), 10_000);
    let mut g = c.benchmark_group("parse");
    g.sample_size(10);
    g.bench_function("parse_validate_10000_containers", |b| {
        b.iter(|| parse_fleet("bench.yaml", std::hint::black_box(&text), &NoFiles).unwrap())
    });
    let plain = plain_fleet(10_000);
    assert_eq!(
        parse_fleet("plain.yaml", &plain, &NoFiles)
            .unwrap()
            .containers
            .len(),
        10_000
    );
    g.bench_function("parse_validate_10000_plain_containers", |b| {
        b.iter(|| parse_fleet("plain.yaml", std::hint::black_box(&plain), &NoFiles).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
