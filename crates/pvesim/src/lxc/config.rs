//! The LXC configuration PVE would generate from a container's options (`PVE::LXC::update_lxc_config`), for this
//! host's cgroup layout: includes, idmap, rootfs, hostname, network (veth on the named bridge, fixed MAC),
//! cgroup limits (v1 `lxc.cgroup.*` on hybrid hosts, `lxc.cgroup2.*` on pure cgroup2 hosts), features (nesting,
//! fuse, keyctl), halt signal for non-systemd inits, console log, then the config's raw `lxc.*` lines.
//! Pure functions: the caller passes the facts it found on the host.

use std::collections::BTreeMap;
use std::path::Path;

use crate::ctconf::CtConf;
use crate::schema::parse_property_string;

/// Which cgroup interface the host offers for limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cgroups {
    /// v1 controllers (hybrid or legacy layout): `lxc.cgroup.*`, `memory.limit_in_bytes`, ...; `memsw` says
    /// whether `memory.memsw.limit_in_bytes` exists (swap accounting on).
    V1 { memsw: bool },
    /// Unified hierarchy with the memory controller: `lxc.cgroup2.*`, `memory.max`, ...
    V2,
}

impl Cgroups {
    /// Looks at `/sys/fs/cgroup` (the root given, for tests).
    pub fn detect(root: &Path) -> Cgroups {
        if root.join("memory/memory.limit_in_bytes").exists() {
            Cgroups::V1 {
                memsw: root.join("memory/memory.memsw.limit_in_bytes").exists(),
            }
        } else {
            Cgroups::V2
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Cgroups::V1 { .. } => "lxc.cgroup",
            Cgroups::V2 => "lxc.cgroup2",
        }
    }
}

/// How the container's init wants to be stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InitKind {
    /// systemd handles SIGPWR (LXC's default halt signal).
    Systemd,
    /// Anything else (for example sshd as PID 1): halt with SIGTERM, or `lxc-stop` waits its whole timeout.
    Other,
}

/// Facts the config needs besides the PVE options.
#[derive(Debug, Clone)]
pub struct Host<'a> {
    pub name: &'a str,
    /// Where pvesim has mounted the rootfs image (through its own loop device; LXC's `dir:` backend on it).
    pub rootfs_dir: &'a Path,
    /// `<lxcpath>/<name>`
    pub dir: &'a Path,
    pub cgroups: Cgroups,
    pub host_cpus: u32,
    pub init: InitKind,
    /// First host uid/gid of unprivileged containers (PVE: 100000).
    pub idmap_base: u32,
}

/// One limit as (key without the `lxc.cgroup[2].` prefix, value), in the order they must be applied when raising.
pub fn limits(o: &BTreeMap<String, String>, cg: Cgroups, host_cpus: u32) -> Vec<(String, String)> {
    let int = |k: &str| o.get(k).and_then(|v| v.parse::<u64>().ok());
    let memory = int("memory").unwrap_or(512);
    let swap = int("swap").unwrap_or(512);
    let mut v = Vec::new();
    match cg {
        Cgroups::V1 { memsw } => {
            if memsw {
                v.push((
                    "memory.memsw.limit_in_bytes".to_string(),
                    ((memory + swap) << 20).to_string(),
                ));
            }
            v.push(("memory.limit_in_bytes".into(), (memory << 20).to_string()));
        }
        Cgroups::V2 => {
            v.push(("memory.max".into(), (memory << 20).to_string()));
            v.push(("memory.swap.max".into(), (swap << 20).to_string()));
        }
    }
    if let Some(c) = int("cores") {
        let n = c.clamp(1, u64::from(host_cpus.max(1)));
        let cpus = if n == 1 {
            "0".to_string()
        } else {
            format!("0-{}", n - 1)
        };
        v.push(("cpuset.cpus".into(), cpus));
    }
    let cpulimit = o
        .get("cpulimit")
        .and_then(|x| x.parse::<f64>().ok())
        .filter(|x| *x > 0.0);
    match cg {
        Cgroups::V1 { .. } => {
            v.push(("cpu.cfs_period_us".into(), "100000".into()));
            let q = cpulimit
                .map(|l| ((l * 100000.0) as i64).to_string())
                .unwrap_or_else(|| "-1".into());
            v.push(("cpu.cfs_quota_us".into(), q));
            v.push((
                "cpu.shares".into(),
                int("cpuunits").unwrap_or(1024).to_string(),
            ));
        }
        Cgroups::V2 => {
            let q = cpulimit
                .map(|l| format!("{} 100000", (l * 100000.0) as i64))
                .unwrap_or_else(|| "max 100000".into());
            v.push(("cpu.max".into(), q));
            v.push((
                "cpu.weight".into(),
                int("cpuunits").unwrap_or(100).to_string(),
            ));
        }
    }
    v
}

fn flag(m: &BTreeMap<String, String>, k: &str) -> bool {
    m.get(k).map(|v| v == "1").unwrap_or(false)
}

/// The `features` option as a map (empty when unset or malformed).
pub fn features(o: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let Some(v) = o.get("features") else {
        return BTreeMap::new();
    };
    crate::schema::property_format("features")
        .and_then(|f| parse_property_string(f, v, "features").ok())
        .unwrap_or_default()
}

/// The seccomp profile for unprivileged containers without `keyctl=1`: LXC's common profile plus `keyctl`
/// answering ENOSYS, as PVE's `pve-userns.seccomp` does (systemd then falls back cleanly).
pub fn seccomp_profile(common: &str) -> String {
    let mut s = common.trim_end().to_string();
    s.push_str("\nkeyctl errno 38\n");
    s
}

/// Whether the container needs the extra seccomp profile (unprivileged and no `keyctl=1`).
pub fn needs_keyctl_block(o: &BTreeMap<String, String>) -> bool {
    flag(o, "unprivileged") && !flag(&features(o), "keyctl")
}

/// The LXC config text for container `conf` on this host. `seccomp` is the path of the profile written by the
/// caller when [`needs_keyctl_block`] says so.
pub fn render(conf: &CtConf, h: &Host<'_>, seccomp: Option<&Path>) -> String {
    let o = &conf.opts;
    let unpriv = flag(o, "unprivileged");
    let feats = features(o);
    let nesting = flag(&feats, "nesting");
    let mut c = String::new();
    let mut kv = |k: &str, v: &str| c.push_str(&format!("{k} = {v}\n"));
    let arch = match o.get("arch").map(String::as_str) {
        Some("i386") => "i386",
        Some("arm64") => "aarch64",
        Some("armhf") => "armhf",
        _ => "amd64",
    };
    kv("lxc.arch", arch);
    kv("lxc.include", "/usr/share/lxc/config/common.conf");
    if unpriv {
        kv("lxc.include", "/usr/share/lxc/config/userns.conf");
    }
    if nesting {
        kv("lxc.include", "/usr/share/lxc/config/nesting.conf");
    }
    kv("lxc.apparmor.profile", "unconfined");
    if nesting {
        kv("lxc.mount.auto", "cgroup:rw:force");
    } else if h.init == InitKind::Systemd {
        kv("lxc.mount.auto", "cgroup:mixed:force");
    }
    if let Some(p) = seccomp {
        kv("lxc.seccomp.profile", &p.display().to_string());
    }
    kv("lxc.monitor.unshare", "1");
    kv(
        "lxc.tty.max",
        o.get("tty").map(String::as_str).unwrap_or("2"),
    );
    kv("lxc.environment", "TERM=linux");
    let hostname = o
        .get("hostname")
        .cloned()
        .unwrap_or_else(|| format!("CT{}", h.name));
    kv("lxc.uts.name", &hostname);
    kv(
        "lxc.rootfs.path",
        &format!("dir:{}", h.rootfs_dir.display()),
    );
    // Custom `lxc.idmap` lines of the config (written last, with the other raw lines) replace PVE's default map.
    if unpriv && !conf.lxc.iter().any(|(k, _)| k == "lxc.idmap") {
        kv("lxc.idmap", &format!("u 0 {} 65536", h.idmap_base));
        kv("lxc.idmap", &format!("g 0 {} 65536", h.idmap_base));
    }
    if h.init == InitKind::Other {
        kv("lxc.signal.halt", "SIGTERM");
    }
    kv(
        "lxc.console.logfile",
        &h.dir.join("console.log").display().to_string(),
    );
    let pre = h.cgroups.prefix();
    for (k, v) in limits(o, h.cgroups, h.host_cpus) {
        kv(&format!("{pre}.{k}"), &v);
    }
    if flag(&feats, "fuse") {
        kv(&format!("{pre}.devices.allow"), "c 10:229 rwm");
        kv(
            "lxc.mount.entry",
            "/dev/fuse dev/fuse none bind,create=file 0 0",
        );
    }
    let mut nets: Vec<(u32, &String)> = o
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("net")?.parse::<u32>().ok()?, v)))
        .collect();
    nets.sort_by_key(|(i, _)| *i);
    for (i, (n, v)) in nets.into_iter().enumerate() {
        let Some(m) = crate::schema::property_format("net0")
            .and_then(|f| parse_property_string(f, v, &format!("net{n}")).ok())
        else {
            continue;
        };
        let p = format!("lxc.net.{i}");
        kv(&format!("{p}.type"), "veth");
        if let Some(b) = m.get("bridge") {
            kv(&format!("{p}.link"), b);
        }
        kv(
            &format!("{p}.flags"),
            if m.get("link_down").map(|x| x == "1").unwrap_or(false) {
                "down"
            } else {
                "up"
            },
        );
        if let Some(name) = m.get("name") {
            kv(&format!("{p}.name"), name);
        }
        if let Some(mac) = m.get("hwaddr") {
            kv(&format!("{p}.hwaddr"), &mac.to_ascii_lowercase());
        }
        if let Some(mtu) = m.get("mtu") {
            kv(&format!("{p}.mtu"), mtu);
        }
    }
    for (k, v) in &conf.opts {
        if !(k.starts_with("mp") && k[2..].parse::<u32>().is_ok()) {
            continue;
        }
        // Bind mounts of host directories as they are, with `ro` and `mountoptions`; a storage volume is
        // mounted by pvesim on `<dir>/mpN` while the container runs (`super::volumes`) and bound from there.
        let mut parts = v.split(',');
        let src = parts.next().unwrap_or("").trim_start_matches("volume=");
        let mut target = "";
        let mut extra = String::new();
        for p in parts {
            if let Some(t) = p.strip_prefix("mp=") {
                target = t.trim_start_matches('/');
            } else if p == "ro=1" {
                extra.push_str(",ro");
            } else if let Some(o) = p.strip_prefix("mountoptions=") {
                // `discard` applies to block devices only; a bind mount has none.
                for o in o.split(';').filter(|o| !o.is_empty() && *o != "discard") {
                    extra.push(',');
                    extra.push_str(o);
                }
            }
        }
        if target.is_empty() {
            continue;
        }
        if src.starts_with('/') {
            kv(
                "lxc.mount.entry",
                &format!("{src} {target} none rbind,create=dir{extra} 0 0"),
            );
        } else if src.contains(':') {
            let host = super::volumes::host_dir(h.dir, k);
            kv(
                "lxc.mount.entry",
                &format!(
                    "{} {target} none bind,create=dir{extra} 0 0",
                    host.display()
                ),
            );
        }
    }
    // Device passthrough: the host's node bind-mounted at the same path and allowed in the devices cgroup
    // (PVE creates the node with `mode`/`uid`/`gid` in a hook; a bind mount keeps the host's owner and mode).
    for (k, v) in &conf.opts {
        if !(k.starts_with("dev") && k[3..].parse::<u32>().is_ok()) {
            continue;
        }
        let Some(m) = crate::schema::property_format("dev0")
            .and_then(|f| parse_property_string(f, v, k).ok())
        else {
            continue;
        };
        let Some(path) = m.get("path") else { continue };
        let deny_write = m.get("deny-write").map(|x| x == "1").unwrap_or(false);
        if let Some((kind, major, minor)) = device_numbers(Path::new(path)) {
            let access = if deny_write { "r" } else { "rw" };
            kv(
                &format!("{pre}.devices.allow"),
                &format!("{kind} {major}:{minor} {access}"),
            );
        }
        let ro = if deny_write { ",ro" } else { "" };
        kv(
            "lxc.mount.entry",
            &format!(
                "{path} {} none bind,create=file{ro} 0 0",
                path.trim_start_matches('/')
            ),
        );
    }
    for (k, v) in &conf.lxc {
        kv(k, v);
    }
    c
}

/// `(c|b, major, minor)` of a device node on the host.
fn device_numbers(path: &Path) -> Option<(char, u64, u64)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let md = std::fs::metadata(path).ok()?;
    let kind = if md.file_type().is_char_device() {
        'c'
    } else if md.file_type().is_block_device() {
        'b'
    } else {
        return None;
    };
    let rdev = md.rdev();
    Some((kind, libc::major(rdev) as u64, libc::minor(rdev) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn conf(lines: &str) -> CtConf {
        CtConf::parse(lines)
    }

    fn host<'a>(img: &'a Path, dir: &'a Path, cg: Cgroups, init: InitKind) -> Host<'a> {
        Host {
            name: "pxsim-n1-100",
            rootfs_dir: img,
            dir,
            cgroups: cg,
            host_cpus: 2,
            init,
            idmap_base: 100000,
        }
    }

    #[test]
    fn unprivileged_v1_static() {
        let c = conf("arch: amd64\nhostname: web1\nmemory: 256\nswap: 128\ncores: 4\nunprivileged: 1\nnet0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:AA:BB:CC,ip=10.77.0.10/24,gw=10.77.0.1,type=veth\nrootfs: local-lvm:vm-100-disk-0,size=2G\n");
        let img = PathBuf::from("/s/img");
        let dir = PathBuf::from("/s/lxc/pxsim-n1-100");
        let t = render(
            &c,
            &host(&img, &dir, Cgroups::V1 { memsw: true }, InitKind::Other),
            None,
        );
        for want in [
            "lxc.include = /usr/share/lxc/config/userns.conf\n",
            "lxc.uts.name = web1\n",
            "lxc.rootfs.path = dir:/s/img\n",
            "lxc.idmap = u 0 100000 65536\nlxc.idmap = g 0 100000 65536\n",
            "lxc.signal.halt = SIGTERM\n",
            "lxc.cgroup.memory.memsw.limit_in_bytes = 402653184\nlxc.cgroup.memory.limit_in_bytes = 268435456\n",
            "lxc.cgroup.cpuset.cpus = 0-1\n",
            "lxc.cgroup.cpu.cfs_quota_us = -1\n",
            "lxc.net.0.type = veth\nlxc.net.0.link = vmbr0\nlxc.net.0.flags = up\nlxc.net.0.name = eth0\nlxc.net.0.hwaddr = bc:24:11:aa:bb:cc\n",
        ] {
            assert!(t.contains(want), "missing {want:?} in\n{t}");
        }
        assert!(!t.contains("cgroup2"), "{t}");
        assert!(
            !t.contains("ipv4"),
            "addresses are the container's business: {t}"
        );
    }

    #[test]
    fn privileged_systemd_v2_with_features() {
        let c = conf("hostname: a\nmemory: 512\ncpulimit: 0.5\nfeatures: nesting=1,fuse=1\nnet0: name=eth0,bridge=br0,hwaddr=BC:24:11:00:00:01,ip=dhcp,type=veth\nlxc.cap.drop: \n");
        let img = PathBuf::from("/i");
        let dir = PathBuf::from("/d");
        let t = render(&c, &host(&img, &dir, Cgroups::V2, InitKind::Systemd), None);
        assert!(!t.contains("lxc.idmap"), "{t}");
        assert!(!t.contains("lxc.signal.halt"), "{t}");
        assert!(
            t.contains("lxc.include = /usr/share/lxc/config/nesting.conf\n"),
            "{t}"
        );
        assert!(t.contains("lxc.mount.auto = cgroup:rw:force\n"), "{t}");
        assert!(t.contains("lxc.cgroup2.memory.max = 536870912\n"), "{t}");
        assert!(t.contains("lxc.cgroup2.cpu.max = 50000 100000\n"), "{t}");
        assert!(
            t.contains("lxc.mount.entry = /dev/fuse dev/fuse none bind,create=file 0 0\n"),
            "{t}"
        );
        assert!(
            t.ends_with("lxc.cap.drop = \n"),
            "raw lxc keys come last: {t}"
        );
    }

    #[test]
    fn keyctl_block_only_for_unprivileged_without_keyctl() {
        let o = |s: &str| conf(s).opts;
        assert!(needs_keyctl_block(&o("unprivileged: 1\n")));
        assert!(!needs_keyctl_block(&o(
            "unprivileged: 1\nfeatures: keyctl=1\n"
        )));
        assert!(!needs_keyctl_block(&o("unprivileged: 0\n")));
        assert!(seccomp_profile("2\ndenylist\n").ends_with("denylist\nkeyctl errno 38\n"));
    }

    #[test]
    fn cgroup_layout_detection() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(Cgroups::detect(d.path()), Cgroups::V2);
        std::fs::create_dir_all(d.path().join("memory")).unwrap();
        std::fs::write(d.path().join("memory/memory.limit_in_bytes"), "").unwrap();
        assert_eq!(Cgroups::detect(d.path()), Cgroups::V1 { memsw: false });
    }
}
