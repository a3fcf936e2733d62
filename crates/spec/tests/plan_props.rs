//! Property tests of the planner:
//! - a fleet planned against itself, applied and observed running, gives no actions;
//! - applying a plan's actions to the observed state (with the pure simulator) and planning again with the new
//!   spec as applied gives an empty plan, whatever the file changed and whatever drifted on the nodes;
//! - planning is deterministic and does not depend on the order the nodes report containers in.

mod plan_support;

use plan_support::*;
use proptest::collection::vec;
use proptest::prelude::*;
use pxfleet_spec::model::*;
use pxfleet_spec::observed::{ManagedMark, ObservedContainer, PowerState};
use pxfleet_spec::plan::simulate::{apply_to_observed, SimOptions};
use pxfleet_spec::plan::{plan, ActionKind};

/// xorshift64*: enough to turn one seed into a varied container.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn flip(&mut self) -> bool {
        self.below(2) == 0
    }
}

fn gen_interface(r: &mut Rng, idx: usize, k: usize) -> Interface {
    let mut i = if r.flip() {
        iface(&format!("eth{k}"))
    } else {
        static_iface(
            &format!("eth{k}"),
            &format!("10.{idx}.{k}.5/24"),
            &format!("10.{idx}.{k}.1"),
        )
    };
    if r.below(4) == 0 {
        i.mac_address = Some(MacAddr([0xBC, 0x24, 0x11, idx as u8, k as u8, 7]));
    }
    if r.below(4) == 0 {
        i.ipv6 = Ipv6Config::Auto;
    }
    i.vlan_id = (r.below(3) == 0).then(|| 10 + k as u16);
    i.firewall = r.flip();
    i.host_managed = r.below(5) == 0;
    if k == 0 && r.below(5) == 0 {
        i.name = "lan0".into();
    }
    i
}

fn gen_container(r: &mut Rng, idx: usize) -> Container {
    let mut c = container(&format!("c{idx}"), r.flip().then_some(100 + idx as u32));
    if r.below(4) == 0 {
        c.env
            .get_or_insert_with(Default::default)
            .insert("APP_ID".into(), idx.to_string());
    }
    if r.below(4) == 0 {
        c.entrypoint = Some(format!("/app --id {idx}"));
    }
    c.node = match r.below(3) {
        0 => None,
        1 => Some("pve1".into()),
        _ => Some("pve2".into()),
    };
    c.cores = (r.below(3) > 0).then(|| 1 + r.below(8) as u32);
    c.cpu_limit = (r.below(4) == 0).then(|| r.below(4) as f64 * 0.5);
    c.memory = 16 + r.below(8192);
    c.swap = r.below(1024);
    c.disk_size = 1 + r.below(64);
    c.datastore_id = match r.below(3) {
        0 => None,
        1 => Some("local-lvm".into()),
        _ => Some("local-zfs".into()),
    };
    c.template = if r.flip() {
        "debian-13".into()
    } else {
        "ubuntu-25.04".into()
    };
    c.unprivileged = r.below(5) > 0;
    c.features = Features {
        nesting: r.flip(),
        fuse: r.flip(),
        keyctl: r.flip(),
        mount: vec![],
        mknod: r.flip(),
        force_rw_sys: r.flip(),
    };
    c.interfaces = (0..1 + r.below(3) as usize)
        .map(|k| gen_interface(r, idx, k))
        .collect();
    c.tags = ["web", "Prod", "db"]
        .iter()
        .filter(|_| r.flip())
        .map(|t| t.to_string())
        .collect();
    c.description = r.flip().then(|| format!("container {idx}\n"));
    c.startup = r.flip().then(|| Startup {
        order: Some(r.below(5) as u32),
        up_delay: None,
        down_delay: None,
    });
    c.start_on_boot = r.flip();
    c.protection = r.below(4) == 0;
    c.password = r.flip().then(|| Secret::new(format!("pw-{}", r.below(3))));
    c.dns.servers = if r.flip() {
        vec!["192.0.2.53".parse().unwrap()]
    } else {
        vec![]
    };
    c.mount_points = (0..r.below(3))
        .map(|k| MountPoint::Volume {
            datastore_id: "local-lvm".into(),
            size_gib: 1 + r.below(100),
            path: format!("/data{k}"),
            backup: r.flip(),
            read_only: false,
            flags: Default::default(),
        })
        .collect();
    c
}

fn gen_fleet(seed: u64, n: usize) -> Fleet {
    let mut r = Rng(seed | 1);
    fleet("prop", (0..n).map(|i| gen_container(&mut r, i)).collect())
}

/// Changes a file might make that pxfleet accepts (no shrinking, nothing protected goes away).
fn mutate(c: &Container, choice: u8, idx: usize) -> Option<Container> {
    let mut c = c.clone();
    match choice % 18 {
        0 => {}
        1 => return None,
        2 => c.cores = Some(c.cores.unwrap_or(1) % 8 + 1),
        3 => c.memory += 256,
        4 => c.disk_size += 4,
        5 => {
            c.template = if c.template == "debian-13" {
                "ubuntu-25.04".into()
            } else {
                "debian-13".into()
            }
        }
        6 => {
            c.node = Some(if c.node.as_deref() == Some("pve2") {
                "pve1".into()
            } else {
                "pve2".into()
            })
        }
        7 => c.tags.push("extra".into()),
        8 => c.features.nesting = !c.features.nesting,
        9 => {
            let k = c.interfaces.len();
            c.interfaces.push(static_iface(
                &format!("eth{k}"),
                &format!("10.{idx}.{k}.9/24"),
                &format!("10.{idx}.{k}.1"),
            ));
        }
        10 => {
            if c.interfaces.len() > 1 {
                c.interfaces.pop();
            }
        }
        11 => c.mount_points.push(MountPoint::Bind {
            host_path: "/srv/shared".into(),
            path: "/shared".into(),
            read_only: true,
            flags: Default::default(),
        }),
        12 => {
            if let Some(MountPoint::Volume { size_gib, .. }) = c.mount_points.first_mut() {
                *size_gib += 10;
            }
        }
        13 => c.vm_id = Some(6000 + idx as u32),
        14 => c.description = Some("changed".into()),
        15 => c.password = Some(Secret::new("rotated")),
        16 => c.dns.domain = Some("example.org".into()),
        _ => c.protection = !c.protection,
    }
    Some(c)
}

/// Things that happen on the nodes behind pxfleet's back.
fn perturb(o: &mut ObservedContainer, choice: u8) -> bool {
    match choice % 8 {
        1 => o.status = PowerState::Stopped,
        2 => return false, // deleted by hand
        3 => o.config.memory += 128,
        4 => o.config.tags = vec!["manual".into()],
        5 => o.config.hostname = "renamed".into(),
        6 => o.config.features.fuse = !o.config.features.fuse,
        7 => o.config.interfaces[0].config.bridge = "vmbr9".into(),
        _ => {}
    }
    true
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn fleet_against_itself_is_empty(seed in any::<u64>(), n in 1usize..12) {
        let f = gen_fleet(seed, n);
        let obs = observe(&f, PowerState::Running);
        let p = plan(&f, Some(&f), &obs).unwrap();
        prop_assert!(p.is_empty(), "{:#?}", p.actions);
        let p = plan(&f, None, &obs).unwrap();
        prop_assert!(p.is_empty(), "without an applied spec: {:#?}", p.actions);
    }

    #[test]
    fn applying_a_plan_converges(
        seed in any::<u64>(),
        n in 1usize..10,
        muts in vec(any::<u8>(), 10),
        perts in vec(any::<u8>(), 10),
        new in 0usize..3,
        ghost in any::<bool>(),
    ) {
        let mut applied = gen_fleet(seed, n);
        for c in applied.containers.values_mut() {
            c.protection = false;
        }
        let mut obs: Vec<ObservedContainer> = observe(&applied, PowerState::Running)
            .into_iter()
            .zip(perts.iter().cycle())
            .filter_map(|(mut o, p)| perturb(&mut o, *p).then_some(o))
            .collect();
        if ghost {
            let mut g = observe(&fleet("prop", vec![container("ghost", Some(9000))]), PowerState::Running);
            g[0].managed = Some(ManagedMark { fleet: "prop".into(), name: "ghost".into() });
            obs.extend(g);
        }
        let mut desired = applied.clone();
        desired.containers = applied
            .containers
            .values()
            .enumerate()
            .filter_map(|(i, c)| mutate(c, muts[i % muts.len()], i))
            .map(|c| (c.name.clone(), c))
            .collect();
        let mut r = Rng(seed ^ 0xABCD);
        for k in 0..new {
            let mut c = gen_container(&mut r, 50 + k);
            c.name = format!("new{k}");
            c.hostname = c.name.clone();
            c.vm_id = c.vm_id.map(|_| 5000 + k as u32);
            desired.containers.insert(c.name.clone(), c);
        }

        let p = plan(&desired, Some(&applied), &obs).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let after = apply_to_observed(&p, &desired, &obs, &SimOptions::default());
        let again = plan(&desired, Some(&desired), &after).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(again.is_empty(), "first plan: {:#?}\nsecond plan: {:#?}", p.actions, again.actions);

        // Every desired container exists and runs; nothing of this fleet is left over.
        for c in desired.containers.values() {
            let o = after.iter().find(|o| o.managed.as_ref().is_some_and(|m| m.name == c.name));
            prop_assert!(o.is_some_and(|o| o.status == PowerState::Running), "{} missing or stopped", c.name);
        }
        prop_assert!(!after.iter().any(|o| o.managed.as_ref().is_some_and(|m| m.name == "ghost")));

        // Deterministic, and independent of the order nodes report in.
        let mut reversed = obs.clone();
        reversed.reverse();
        let p2 = plan(&desired, Some(&applied), &reversed).unwrap();
        prop_assert_eq!(&p, &p2);
        prop_assert!(p.actions.iter().all(|a| !matches!(a.kind, ActionKind::Stop)));
    }
}
