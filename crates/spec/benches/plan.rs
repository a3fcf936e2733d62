//! Planner benchmark: a generated 10,000-container fleet planned against 10,000 applied and observed
//! containers (target: < 50 ms), once with nothing to do and once with 10% of the containers changed.
//! Run: `cargo bench -p pxfleet-spec --bench plan`.

#[path = "../tests/plan_support/mod.rs"]
mod plan_support;

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use plan_support::*;
use pxfleet_spec::model::{Fleet, MountPoint, Startup};
use pxfleet_spec::observed::PowerState;
use pxfleet_spec::plan::plan;

const N: u32 = 10_000;

fn big_fleet() -> Fleet {
    let containers = (0..N)
        .map(|i| {
            let mut c = container(&format!("ct-{i:05}"), Some(100 + i));
            c.node = Some(format!("pve{}", i % 16));
            c.tags = vec!["bench".into(), format!("group{}", i % 10)];
            c.startup = Some(Startup {
                order: Some(i % 7),
                up_delay: None,
                down_delay: None,
            });
            c.interfaces[0] = static_iface(
                "eth0",
                &format!("10.{}.{}.{}/16", i / 65536, (i / 256) % 256, i % 256),
                "10.0.0.1",
            );
            if i % 3 == 0 {
                c.mount_points.push(MountPoint::Volume {
                    datastore_id: "local-lvm".into(),
                    size_gib: 10,
                    path: "/data".into(),
                    backup: true,
                    read_only: false,
                    flags: Default::default(),
                });
            }
            c
        })
        .collect();
    fleet("bench", containers)
}

fn bench_plan(c: &mut Criterion) {
    let applied = big_fleet();
    let observed = observe(&applied, PowerState::Running);
    let mut changed = applied.clone();
    for (i, ct) in changed.containers.values_mut().enumerate() {
        if i % 10 == 0 {
            ct.memory += 512;
            ct.tags.push("changed".into());
        }
    }
    assert!(plan(&applied, Some(&applied), &observed)
        .unwrap()
        .is_empty());
    assert_eq!(
        plan(&changed, Some(&applied), &observed)
            .unwrap()
            .actions
            .len(),
        (N / 10) as usize
    );

    let mut g = c.benchmark_group("plan_10k");
    g.sample_size(20);
    g.bench_function("no_changes", |b| {
        b.iter(|| {
            plan(
                black_box(&applied),
                Some(black_box(&applied)),
                black_box(&observed),
            )
            .unwrap()
        })
    });
    g.bench_function("ten_percent_changed", |b| {
        b.iter(|| {
            plan(
                black_box(&changed),
                Some(black_box(&applied)),
                black_box(&observed),
            )
            .unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, bench_plan);
criterion_main!(benches);
