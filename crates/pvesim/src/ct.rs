//! Container operations of the memory backend: create, set, start/stop/shutdown/reboot, destroy, resize,
//! unlock, migrate, status (`vmstatus`), interfaces; config locks, `lock: create`, normalisation of values,
//! disks and capacity, runtime state (`runtime/<vmid>.json`) and DHCP leases. Nothing runs inside a container.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::ctconf::CtConf;
use crate::error::{Result, SimError};
use crate::lock::{self, Held};
use crate::node::{write_file, Node, GIB};
use crate::schema::{self, parse_property_string, property_format};
use crate::storage;
use crate::task::{self, now, TaskLog, TaskOutcome};

/// Runtime state of a container on the memory backend.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Runtime {
    pub running: bool,
    pub started: u64,
    pub pid: u32,
    /// dhcp addresses by interface name
    #[serde(default)]
    pub leases: BTreeMap<String, String>,
    /// Keys given with `ssh-public-keys` at create (root's `authorized_keys`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub authorized_keys: Vec<String>,
    /// Users whose password `chpasswd` set: user -> SHA-256 hex of the password (the CT's shadow file).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub passwords: BTreeMap<String, String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct FaultState {
    creates_failed: u32,
    lock_since: Option<u64>,
}

fn runtime_path(node: &Node, vmid: u32) -> PathBuf {
    node.state.join("runtime").join(format!("{vmid}.json"))
}

pub fn runtime(node: &Node, vmid: u32) -> Runtime {
    let rt = fs::read_to_string(runtime_path(node, vmid))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    if crate::lxc::is_lxc(node) {
        return crate::lxc::observe(node, vmid, rt);
    }
    rt
}

fn save_runtime(node: &Node, vmid: u32, rt: &Runtime) -> Result<()> {
    write_file(
        &runtime_path(node, vmid),
        &serde_json::to_string(rt).unwrap_or_default(),
    )
}

pub fn conf_path(node: &Node, vmid: u32) -> PathBuf {
    node.conf_dir().join(format!("{vmid}.conf"))
}

/// Reads the config of a CT on this node; PVE's message when it is missing or on another node.
pub fn read_conf(node: &Node, vmid: u32) -> Result<(CtConf, String)> {
    let p = conf_path(node, vmid);
    match fs::read_to_string(&p) {
        Ok(raw) => Ok((CtConf::parse(&raw), raw)),
        Err(_) => Err(SimError::die(format!(
            "Configuration file 'nodes/{}/lxc/{vmid}.conf' does not exist",
            node.name()
        ))),
    }
}

pub fn write_conf(node: &Node, vmid: u32, c: &CtConf) -> Result<()> {
    write_file(&conf_path(node, vmid), &c.write())
}

fn check_lock(c: &CtConf) -> Result<()> {
    match c.lock() {
        Some(l) => Err(SimError::die(format!("CT is locked ({l})"))),
        None => Ok(()),
    }
}

fn with_faults<T>(node: &Node, f: impl FnOnce(&mut FaultState) -> T) -> Result<T> {
    let _g = lock::lock_blocking(&node.state.join("lock").join("faults.lock"))?;
    let p = node.state.join("faults-state.json");
    let mut st: FaultState = fs::read_to_string(&p)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let r = f(&mut st);
    write_file(&p, &serde_json::to_string(&st).unwrap_or_default())?;
    Ok(r)
}

/// Takes the config lock of `vmid` (10 s, or 5 s for create), honouring the `lock_vmid` fault.
pub fn lock_ct(node: &Node, vmid: u32, create: bool, err: &mut String) -> Result<Held> {
    let mut busy = None;
    if let Some(f) = node.cfg.faults.lock_vmid.clone().filter(|f| f.vmid == vmid) {
        let since = with_faults(node, |s| *s.lock_since.get_or_insert(now()))?;
        let until = since + f.seconds;
        let n = now();
        if until > n {
            busy = Some(Instant::now() + Duration::from_secs(until - n));
        }
    }
    let timeout = Duration::from_secs(if create { 5 } else { 10 });
    lock::lock_config(node.cluster(), vmid, timeout, busy, err)
}

fn sleep_ms(ms: u64) {
    if ms > 0 {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

/// `format_size`: the largest exact binary unit.
pub fn format_size(bytes: u64) -> String {
    if bytes == 0 {
        return "0T".into();
    }
    for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if bytes.trailing_zeros() >= shift {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// `parse_size` (bytes without unit).
pub fn parse_size(s: &str) -> Option<u64> {
    let (num, mul) = match s.chars().last()? {
        'K' => (&s[..s.len() - 1], 1u64 << 10),
        'M' => (&s[..s.len() - 1], 1u64 << 20),
        'G' => (&s[..s.len() - 1], 1u64 << 30),
        'T' => (&s[..s.len() - 1], 1u64 << 40),
        _ => (s, 1),
    };
    num.parse::<f64>().ok().map(|n| (n * mul as f64) as u64)
}

fn random_mac() -> String {
    let mut r = rand::rng();
    format!(
        "BC:24:11:{:02X}:{:02X}:{:02X}",
        r.random::<u8>(),
        r.random::<u8>(),
        r.random::<u8>()
    )
}

/// `print_property_string`: the default key (or `name`, `mp`) first, then the rest alphabetically.
fn print_prop(m: &BTreeMap<String, String>, first: &[&str]) -> String {
    let mut parts = Vec::new();
    for f in first {
        if let Some(v) = m.get(*f) {
            if *f == "volume" {
                parts.push(v.clone());
            } else {
                parts.push(format!("{f}={v}"));
            }
        }
    }
    for (k, v) in m {
        if !first.contains(&k.as_str()) {
            parts.push(format!("{k}={v}"));
        }
    }
    parts.join(",")
}

fn parse_prop(param: &str, value: &str) -> Result<BTreeMap<String, String>> {
    let base: String = param
        .trim_end_matches(|c: char| c.is_ascii_digit())
        .to_string();
    let key = if base == "rootfs" {
        "rootfs".to_string()
    } else {
        format!("{base}0")
    };
    let f =
        property_format(&key).ok_or_else(|| SimError::die(format!("no format for '{param}'")))?;
    parse_property_string(&f, value, param)
        .map_err(|e| SimError::param(param, format!("invalid format - {e}")))
}

/// Normalises a netN value: stored form with a fresh MAC if none was given; checks the bridge exists.
fn normalize_net(node: &Node, param: &str, value: &str) -> Result<String> {
    let mut m = parse_prop(param, value)?;
    m.entry("hwaddr".into()).or_insert_with(random_mac);
    if let Some(h) = m.get_mut("hwaddr") {
        *h = h.to_ascii_uppercase();
    }
    m.insert("type".into(), "veth".into());
    if let Some(b) = m.get("bridge") {
        match node.cfg.bridge.iter().find(|x| &x.name == b) {
            None => return Err(SimError::die(format!("bridge '{b}' does not exist"))),
            Some(br) => {
                if let Some(mtu) = m.get("mtu").and_then(|x| x.parse::<u32>().ok()) {
                    if mtu > br.mtu {
                        return Err(SimError::die(format!(
                            "{param}: MTU size '{mtu}' is bigger than bridge MTU '{}'",
                            br.mtu
                        )));
                    }
                }
            }
        }
    }
    Ok(print_prop(&m, &["name"]))
}

fn normalize_tags(v: &str) -> String {
    let mut t: Vec<String> = schema::split_list(v)
        .into_iter()
        .map(|s| s.to_lowercase())
        .collect();
    t.sort();
    t.dedup();
    t.join(";")
}

/// A planned disk: `rootfs`/`mpN` with a `STORAGE:GiB` allocation or an existing volume.
struct DiskPlan {
    key: String,
    opts: BTreeMap<String, String>,
    alloc: Option<(String, u64)>,
}

fn plan_disk(node: &Node, key: &str, value: &str, default_storage: &str) -> Result<DiskPlan> {
    let mut opts = parse_prop(key, value)?;
    let vol = opts.get("volume").cloned().unwrap_or_default();
    if key.starts_with("mp") && !opts.contains_key("mp") {
        return Err(SimError::param(
            key,
            "invalid format - format error\nmp: property is missing and it is not optional\n",
        ));
    }
    let re = regex::Regex::new(r"^([^:\s]+):(\d+(\.\d+)?)$").expect("static regex");
    let alloc = if let Some(c) = re.captures(&vol) {
        Some((
            c[1].to_string(),
            (c[2].parse::<f64>().unwrap_or(0.0) * GIB as f64) as u64,
        ))
    } else if let Ok(g) = vol.parse::<f64>() {
        Some((default_storage.to_string(), (g * GIB as f64) as u64))
    } else {
        None
    };
    if let Some((sid, _)) = &alloc {
        let st = storage::get(node, sid)?;
        if !st.enabled {
            return Err(SimError::die(format!("storage '{sid}' is disabled")));
        }
        if !st.content.iter().any(|c| c == "rootdir") {
            return Err(SimError::param(
                "storage",
                format!("storage '{sid}' does not support container directories"),
            ));
        }
        opts.remove("volume");
    }
    Ok(DiskPlan {
        key: key.to_string(),
        opts,
        alloc,
    })
}

fn finish_disk(d: &DiskPlan, volid: &str, size: u64) -> String {
    let mut m = d.opts.clone();
    m.insert("volume".into(), volid.to_string());
    m.insert("size".into(), format_size(size));
    print_prop(&m, &["volume", "mp"])
}

fn is_disk_key(k: &str) -> bool {
    k == "rootfs" || (k.starts_with("mp") && k[2..].parse::<u32>().is_ok())
}

fn is_net_key(k: &str) -> bool {
    k.starts_with("net") && k[3..].parse::<u32>().is_ok()
}

/// Normalises a plain (non-disk) option value as PVE stores it.
fn normalize_value(node: &Node, k: &str, v: &str) -> Result<String> {
    Ok(match k {
        _ if is_net_key(k) => normalize_net(node, k, v)?,
        "tags" => normalize_tags(v),
        "nameserver" | "searchdomain" => schema::split_list(v).join(" "),
        "cpuunits" => v
            .parse::<u64>()
            .map(|x| x.min(10000).to_string())
            .unwrap_or_else(|_| v.to_string()),
        "features" | "startup" => v.to_string(),
        _ if k.starts_with("dev") => {
            let m = parse_prop(k, v)?;
            print_prop(&m, &["path"])
        }
        _ => v.to_string(),
    })
}

const CREATE_ONLY: &[&str] = &[
    "vmid",
    "node",
    "ostemplate",
    "storage",
    "password",
    "ssh-public-keys",
    "start",
    "pool",
    "force",
    "restore",
    "unique",
    "ignore-unpack-errors",
    "bwlimit",
    "ha-managed",
];

fn ostype_of(template: &str) -> &'static str {
    let t = template.to_ascii_lowercase();
    for (p, o) in [
        ("debian", "debian"),
        ("ubuntu", "ubuntu"),
        ("alpine", "alpine"),
        ("almalinux", "centos"),
        ("rocky", "centos"),
        ("centos", "centos"),
        ("fedora", "fedora"),
        ("opensuse", "opensuse"),
        ("archlinux", "archlinux"),
        ("devuan", "devuan"),
        ("gentoo", "gentoo"),
        ("nixos", "nixos"),
    ] {
        if t.starts_with(p) {
            return o;
        }
    }
    "unmanaged"
}

fn fake_fingerprint(seed: &str) -> String {
    use sha2::Digest;
    let h = sha2::Sha512::digest(seed.as_bytes());
    let b64: String = h
        .iter()
        .map(|b| {
            const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            A[(*b as usize) % 64] as char
        })
        .collect();
    b64[..43].to_string()
}

/// `pct create` / `POST /nodes/{node}/lxc`. Checks before the task return `Err`; a task failure is reported in
/// the outcome (the config is then removed and the disks freed).
pub fn create(
    node: &Node,
    p: &BTreeMap<String, String>,
    out: &mut String,
    err: &mut String,
) -> Result<TaskOutcome> {
    let vmid: u32 = p["vmid"]
        .parse()
        .map_err(|_| SimError::param("vmid", "value does not look like a valid VM ID"))?;
    let check_unused = || -> Result<()> {
        if let Some((n, ty)) = node.vmlist().get(&vmid) {
            let what = if *ty == "qemu" { "VM" } else { "CT" };
            return Err(SimError::die(format!(
                "{what} {vmid} already exists on node '{n}'"
            )));
        }
        Ok(())
    };
    let ssh_keys = match p.get("ssh-public-keys") {
        Some(k) => crate::sshkey::validate(k)?,
        None => Vec::new(),
    };
    check_unused()?;
    let ostemplate = p["ostemplate"].clone();
    let tmpl_path = if ostemplate.starts_with('/') {
        PathBuf::from(&ostemplate)
    } else {
        let (sid, name) = storage::split_volid(&ostemplate)?;
        let st = storage::get(node, &sid)?;
        let Some(file) = name.strip_prefix("vztmpl/") else {
            return Err(SimError::die(format!(
                "unable to use volume {ostemplate} - content type needs to be 'vztmpl'"
            )));
        };
        if storage::template_format(file).is_none() {
            return Err(SimError::die(format!(
                "unable to parse directory volume name '{name}'"
            )));
        }
        if !st.content.iter().any(|c| c == "vztmpl") {
            return Err(SimError::die(format!(
                "storage '{sid}' does not support vztmpl content"
            )));
        }
        storage::volume_path(node, &ostemplate)?
    };
    let default_storage = p.get("storage").cloned().unwrap_or_else(|| "local".into());
    let mut disks = Vec::new();
    let has_mp = p.keys().any(|k| k.starts_with("mp") && is_disk_key(k));
    if has_mp && !p.contains_key("rootfs") {
        return Err(SimError::die(
            "mount points configured, but 'rootfs' not set - aborting",
        ));
    }
    let rootfs = p
        .get("rootfs")
        .cloned()
        .unwrap_or_else(|| format!("{default_storage}:4"));
    disks.push(plan_disk(node, "rootfs", &rootfs, &default_storage)?);
    for (k, v) in p {
        if k != "rootfs" && is_disk_key(k) {
            disks.push(plan_disk(node, k, v, &default_storage)?);
        }
    }
    let mut final_opts = BTreeMap::new();
    let mut description = String::new();
    for (k, v) in p {
        if CREATE_ONLY.contains(&k.as_str()) || is_disk_key(k) {
            continue;
        }
        if k.starts_with("unused") {
            err.push_str(&format!(
                "ignoring '{k}', cannot create/restore with unused volume\n"
            ));
            continue;
        }
        if k == "description" {
            description = if v.ends_with('\n') {
                v.clone()
            } else {
                format!("{v}\n")
            };
            continue;
        }
        final_opts.insert(k.clone(), normalize_value(node, k, v)?);
    }

    // create_and_lock_config
    let _held = lock_ct(node, vmid, true, err)?;
    {
        let _vl = lock::lock_blocking(&node.cluster().join("lock").join("vmlist.lock"))?;
        check_unused()?;
        let path = conf_path(node, vmid);
        if let Some(d) = path.parent() {
            fs::create_dir_all(d).map_err(|e| SimError::io(d, e))?;
        }
        fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"lock: create\n"))
            .map_err(|_| {
                SimError::die(format!(
                    "CT {vmid} already exists on node '{}'",
                    node.name()
                ))
            })?;
    }

    let hostname = final_opts
        .get("hostname")
        .cloned()
        .unwrap_or_else(|| format!("CT{vmid}"));
    let start_after = p.get("start").map(|s| s == "1").unwrap_or(false);
    let mut allocated: Vec<String> = Vec::new();
    let outcome = task::run_task(node, out, "vzcreate", &vmid.to_string(), |log| {
        // As in PVE's worker: on failure free the disks, remove the config, and die with the prefixed message
        // (so the task log says `TASK ERROR: unable to create CT <vmid> - ...`).
        let r = create_body(
            node,
            vmid,
            &disks,
            &final_opts,
            &description,
            &hostname,
            &ostemplate,
            &tmpl_path,
            log,
            &mut allocated,
        )
        .and_then(|()| {
            // lxc backend: the real rootfs (mkfs, template, hostname/network/keys/password), see crate::lxc
            if !crate::lxc::is_lxc(node) {
                return Ok(());
            }
            let (conf, _) = read_conf(node, vmid)?;
            Ok(crate::lxc::create(
                node,
                vmid,
                &conf.opts,
                &tmpl_path,
                p.get("password").map(String::as_str),
                p.get("ssh-public-keys").map(String::as_str),
                log,
            )?)
        });
        if let Err(e) = r {
            if crate::lxc::is_lxc(node) {
                crate::lxc::forget(node, vmid);
            }
            for v in &allocated {
                let _ = storage::free(node, v);
            }
            let _ = fs::remove_file(conf_path(node, vmid));
            let _ = fs::remove_file(runtime_path(node, vmid));
            return Err(match e {
                SimError::Die(m) => SimError::die(format!("unable to create CT {vmid} - {m}")),
                other => other,
            });
        }
        Ok(())
    })?;
    if outcome.ok() && !ssh_keys.is_empty() {
        let mut rt = runtime(node, vmid);
        rt.authorized_keys = ssh_keys;
        save_runtime(node, vmid, &rt)?;
    }
    if start_after && outcome.ok() {
        drop(_held);
        let mut e2 = String::new();
        if let Err(e) = start(node, vmid, false, out, &mut e2) {
            err.push_str(&e.render(None));
        }
        err.push_str(&e2);
    }
    Ok(outcome)
}

#[allow(clippy::too_many_arguments)]
fn create_body(
    node: &Node,
    vmid: u32,
    disks: &[DiskPlan],
    final_opts: &BTreeMap<String, String>,
    description: &str,
    hostname: &str,
    ostemplate: &str,
    tmpl_path: &std::path::Path,
    log: &mut TaskLog,
    allocated: &mut Vec<String>,
) -> Result<()> {
    sleep_ms(node.cfg.latency.create_ms);
    let mut conf = CtConf::default();
    for d in disks {
        let (volid, size) = match &d.alloc {
            Some((sid, size)) => {
                let mut lines = Vec::new();
                let r = storage::alloc(node, sid, vmid, *size, &mut lines);
                for l in lines {
                    log.line(l);
                }
                let volid = r?;
                allocated.push(volid.clone());
                let st = storage::get(node, sid)?;
                if st.kind != "zfspool" {
                    let blocks = size / 4096;
                    log.line(format!(
                        "Creating filesystem with {blocks} 4k blocks and {} inodes",
                        (blocks / 4).max(1)
                    ));
                    log.line(format!("Filesystem UUID: {}", uuid_like(&volid)));
                    log.line("Superblock backups stored on blocks: ");
                    log.line("\t32768, 98304, 163840, 229376, 294912, 819200, 884736, 1605632");
                }
                (volid, *size)
            }
            None => {
                let vol = d.opts.get("volume").cloned().unwrap_or_default();
                let size = if vol.starts_with('/') {
                    0
                } else {
                    storage::size_of(node, &vol)?
                };
                (vol, size)
            }
        };
        let mut d2 = DiskPlan {
            key: d.key.clone(),
            opts: d.opts.clone(),
            alloc: None,
        };
        d2.opts.remove("volume");
        let text = finish_disk(&d2, &volid, size);
        conf.opts.insert(
            d.key.clone(),
            if d.key == "rootfs" {
                text
            } else {
                text.clone()
            },
        );
    }
    if let Some(f) = &node.cfg.faults.fail_creates {
        let fire = with_faults(node, |s| {
            if s.creates_failed < f.count {
                s.creates_failed += 1;
                true
            } else {
                false
            }
        })?;
        if fire {
            return Err(SimError::die(f.message.clone()));
        }
    }
    if !tmpl_path.is_file() {
        return Err(SimError::die(format!("can't find file '{ostemplate}'")));
    }
    let tsize = fs::metadata(tmpl_path).map(|m| m.len()).unwrap_or(0);
    // the lxc backend logs the real extraction and host keys (crate::lxc::create)
    let lxc = crate::lxc::is_lxc(node);
    if !lxc {
        log.line(format!("extracting archive '{}'", tmpl_path.display()));
        log.line(format!(
            "Total bytes read: {tsize} ({}MiB, 169MiB/s)",
            tsize >> 20
        ));
    }
    let arch = final_opts
        .get("arch")
        .cloned()
        .unwrap_or_else(|| "amd64".into());
    if !final_opts.contains_key("arch") {
        log.line(format!("Detected container architecture: {arch}"));
    }
    let file_name = tmpl_path
        .file_name()
        .map(|f| f.to_string_lossy().to_string())
        .unwrap_or_default();
    let detected = ostype_of(&file_name);
    if let Some(given) = final_opts.get("ostype") {
        if given != detected && detected != "unmanaged" {
            log.warn(format!("got unexpected ostype ({detected} != {given})"));
        }
    }
    if !lxc
        && final_opts
            .get("ostype")
            .map(String::as_str)
            .unwrap_or(detected)
            != "unmanaged"
    {
        for k in ["ed25519", "rsa", "ecdsa"] {
            log.line(format!(
                "Creating SSH host key 'ssh_host_{k}_key' - this may take some time ..."
            ));
            log.line(format!(
                "done: SHA256:{} root@{hostname}",
                fake_fingerprint(&format!("{vmid}{k}{}", now()))
            ));
        }
    }
    for (k, v) in final_opts {
        conf.opts.insert(k.clone(), v.clone());
    }
    conf.opts.insert("arch".into(), arch);
    conf.opts
        .entry("ostype".into())
        .or_insert_with(|| detected.to_string());
    conf.opts
        .entry("hostname".into())
        .or_insert_with(|| hostname.to_string());
    conf.opts
        .entry("memory".into())
        .or_insert_with(|| "512".into());
    conf.opts
        .entry("swap".into())
        .or_insert_with(|| "512".into());
    conf.opts
        .entry("unprivileged".into())
        .or_insert_with(|| "1".into());
    conf.description = description.to_string();
    write_conf(node, vmid, &conf)?;
    Ok(())
}

fn uuid_like(seed: &str) -> String {
    use sha2::Digest;
    let h = hex::encode(sha2::Sha256::digest(seed.as_bytes()));
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

const HOT_KEYS: &[&str] = &[
    "description",
    "onboot",
    "startup",
    "protection",
    "hostname",
    "hookscript",
    "cores",
    "tags",
    "lock",
    "memory",
    "swap",
    "cpulimit",
    "cpuunits",
];

/// `pct set` / `PUT .../config`.
pub fn set(node: &Node, vmid: u32, p: &BTreeMap<String, String>, err: &mut String) -> Result<()> {
    let mut changes: BTreeMap<String, String> = p
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "vmid" | "node" | "delete" | "revert" | "digest"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let deletes = p
        .get("delete")
        .map(|d| schema::split_list(d))
        .unwrap_or_default();
    let reverts = p
        .get("revert")
        .map(|d| schema::split_list(d))
        .unwrap_or_default();
    if changes.is_empty() && deletes.is_empty() && reverts.is_empty() {
        return Err(SimError::die("no options specified"));
    }
    let _held = lock_ct(node, vmid, false, err)?;
    let (mut conf, raw) = read_conf(node, vmid)?;
    if let Some(d) = p.get("digest") {
        if *d != crate::ctconf::digest(&raw) {
            return Err(SimError::die(
                "detected modified configuration - file changed by other user? Try again.",
            ));
        }
    }
    if !(changes.len() == 1 && changes.contains_key("lock")) {
        check_lock(&conf)?;
    }
    if changes.contains_key("unprivileged") {
        return Err(SimError::param(
            "unprivileged",
            "unable to modify read-only option: 'unprivileged'",
        ));
    }
    sleep_ms(node.cfg.latency.set_ms);
    let running = runtime(node, vmid).running;
    for d in &deletes {
        if matches!(d.as_str(), "memory" | "rootfs" | "ostype") {
            return Err(SimError::die(format!(
                "unable to delete required option '{d}'"
            )));
        }
        if !conf.opts.contains_key(d) && (d != "description" || conf.description.is_empty()) {
            err.push_str(&format!(
                "cannot delete '{d}' - not set in current configuration!\n"
            ));
            continue;
        }
        if running && !HOT_KEYS.contains(&d.as_str()) && !is_net_key(d) {
            conf.pending_delete.push(d.clone());
        } else if d == "description" {
            conf.description.clear();
        } else {
            let old = conf.opts.remove(d);
            if let (true, Some(old)) = (d.starts_with("mp"), old) {
                add_unused(&mut conf, &old);
            }
        }
    }
    for r in &reverts {
        conf.pending.remove(r);
        conf.pending_delete.retain(|x| x != r);
    }
    if let Some(desc) = changes.remove("description") {
        conf.description = if desc.is_empty() || desc.ends_with('\n') {
            desc
        } else {
            format!("{desc}\n")
        };
    }
    for (k, v) in changes {
        let value = if is_disk_key(&k) {
            let d = plan_disk(node, &k, &v, "local")?;
            match &d.alloc {
                Some((sid, size)) => {
                    let mut lines = Vec::new();
                    let volid = storage::alloc(node, sid, vmid, *size, &mut lines)?;
                    finish_disk(&d, &volid, *size)
                }
                None => {
                    let vol = d.opts.get("volume").cloned().unwrap_or_default();
                    let size = if vol.starts_with('/') {
                        0
                    } else {
                        storage::size_of(node, &vol).unwrap_or(0)
                    };
                    let mut d2 = DiskPlan {
                        key: d.key.clone(),
                        opts: d.opts.clone(),
                        alloc: None,
                    };
                    d2.opts.remove("volume");
                    finish_disk(&d2, &vol, size)
                }
            }
        } else {
            normalize_value(node, &k, &v)?
        };
        if running
            && !HOT_KEYS.contains(&k.as_str())
            && !is_net_key(&k)
            && (!k.starts_with("mp") || conf.opts.contains_key(&k))
        {
            conf.pending.insert(k, value);
        } else {
            if let Some(old) = conf.opts.insert(k.clone(), value) {
                if k.starts_with("mp") && is_disk_key(&k) {
                    let oldvol = old.split(',').next().unwrap_or("").to_string();
                    if !conf.opts[&k].starts_with(&format!("{oldvol},")) {
                        add_unused(&mut conf, &old);
                    }
                }
            }
            conf.pending.remove(&k);
        }
    }
    write_conf(node, vmid, &conf)?;
    if running && crate::lxc::is_lxc(node) {
        crate::lxc::apply_limits(node, vmid, &conf)?;
    }
    Ok(())
}

fn add_unused(conf: &mut CtConf, old: &str) {
    let vol = old.split(',').next().unwrap_or("").to_string();
    if vol.starts_with('/') || vol.is_empty() {
        return;
    }
    let n = (0..256)
        .find(|i| !conf.opts.contains_key(&format!("unused{i}")))
        .unwrap_or(0);
    conf.opts.insert(format!("unused{n}"), vol);
}

fn apply_pending(conf: &mut CtConf) {
    for (k, v) in std::mem::take(&mut conf.pending) {
        conf.opts.insert(k, v);
    }
    for d in std::mem::take(&mut conf.pending_delete) {
        // as at once on a stopped CT: a deleted mount point's volume stays, as unusedN
        if let (true, Some(old)) = (d.starts_with("mp"), conf.opts.remove(&d)) {
            add_unused(conf, &old);
        }
    }
}

fn ipv4_add(base: std::net::Ipv4Addr, n: u32) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::from(u32::from(base) + n)
}

fn assign_leases(node: &Node, vmid: u32, conf: &CtConf, rt: &mut Runtime) -> Result<()> {
    let _g = lock::lock_blocking(&node.state.join("lock").join("dhcp.lock"))?;
    let first: std::net::Ipv4Addr = node.cfg.dhcp.first.parse().map_err(|_| {
        SimError::state(
            node.state.join("node.toml"),
            "dhcp.first is not an IPv4 address",
        )
    })?;
    let last: std::net::Ipv4Addr = node.cfg.dhcp.last.parse().map_err(|_| {
        SimError::state(
            node.state.join("node.toml"),
            "dhcp.last is not an IPv4 address",
        )
    })?;
    let leases_path = node.state.join("dhcp-leases.json");
    let mut leases: BTreeMap<String, String> = fs::read_to_string(&leases_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    rt.leases.clear();
    for (k, v) in &conf.opts {
        if !is_net_key(k) {
            continue;
        }
        let Ok(m) = parse_prop(k, v) else { continue };
        if m.get("ip").map(String::as_str) != Some("dhcp") {
            continue;
        }
        let mac = m.get("hwaddr").cloned().unwrap_or_default();
        let addr = match leases.get(&mac) {
            Some(a) => a.clone(),
            None => {
                let used: Vec<&String> = leases.values().collect();
                let n = (0..=(u32::from(last).saturating_sub(u32::from(first))))
                    .map(|i| ipv4_add(first, i).to_string())
                    .find(|a| !used.contains(&a))
                    .ok_or_else(|| {
                        SimError::die(format!(
                            "no free address in the simulated DHCP range for CT {vmid}"
                        ))
                    })?;
                leases.insert(mac.clone(), n.clone());
                n
            }
        };
        rt.leases.insert(
            m.get("name").cloned().unwrap_or_default(),
            format!("{addr}/{}", node.cfg.dhcp.prefix),
        );
    }
    write_file(
        &leases_path,
        &serde_json::to_string(&leases).unwrap_or_default(),
    )
}

/// `pct start`.
pub fn start(
    node: &Node,
    vmid: u32,
    skiplock: bool,
    out: &mut String,
    err: &mut String,
) -> Result<TaskOutcome> {
    let _held = lock_ct(node, vmid, false, err)?;
    let (mut conf, _) = read_conf(node, vmid)?;
    let mut rt = runtime(node, vmid);
    if rt.running {
        return Err(SimError::die(format!("CT {vmid} already running")));
    }
    task::run_task(node, out, "vzstart", &vmid.to_string(), |_log| {
        if !skiplock && conf.lock().map(|l| l != "mounted").unwrap_or(false) {
            check_lock(&conf)?;
        }
        if conf.opts.get("template").map(|t| t == "1").unwrap_or(false) {
            return Err(SimError::die("you can't start a CT if it's a template"));
        }
        sleep_ms(node.cfg.latency.start_ms);
        if !conf.pending.is_empty() || !conf.pending_delete.is_empty() {
            apply_pending(&mut conf);
            write_conf(node, vmid, &conf)?;
        }
        if crate::lxc::is_lxc(node) {
            rt.pid = crate::lxc::start(node, vmid, &conf, _log)?;
        } else {
            assign_leases(node, vmid, &conf, &mut rt)?;
            rt.pid = 40000 + (vmid % 20000);
        }
        rt.running = true;
        rt.started = now();
        save_runtime(node, vmid, &rt)
    })
}

/// `pct stop` (`shutdown` = false) or `pct shutdown`.
pub fn stop(
    node: &Node,
    vmid: u32,
    shutdown: bool,
    skiplock: bool,
    out: &mut String,
    err: &mut String,
) -> Result<TaskOutcome> {
    let _held = lock_ct(node, vmid, false, err)?;
    let (conf, _) = read_conf(node, vmid)?;
    let mut rt = runtime(node, vmid);
    if !rt.running {
        return Err(SimError::die(format!("CT {vmid} not running")));
    }
    let ttype = if shutdown { "vzshutdown" } else { "vzstop" };
    task::run_task(node, out, ttype, &vmid.to_string(), |_log| {
        if !skiplock && conf.lock().map(|l| l != "mounted").unwrap_or(false) {
            check_lock(&conf)?;
        }
        sleep_ms(node.cfg.latency.stop_ms);
        if crate::lxc::is_lxc(node) {
            crate::lxc::stop(node, vmid, shutdown)?;
        }
        rt.running = false;
        rt.started = 0;
        rt.pid = 0;
        save_runtime(node, vmid, &rt)
    })
}

/// `pct shutdown [--timeout S] [--forceStop 1]`. On the memory backend a shutdown slower than the timeout (latency
/// `stop_ms`) fails its task with `container did not stop` after the timeout, as PVE's does, unless `forceStop`.
pub fn shutdown(
    node: &Node,
    vmid: u32,
    timeout_s: u64,
    force: bool,
    out: &mut String,
    err: &mut String,
) -> Result<TaskOutcome> {
    if crate::lxc::is_lxc(node) || force || node.cfg.latency.stop_ms <= timeout_s * 1000 {
        return stop(node, vmid, true, false, out, err);
    }
    let _held = lock_ct(node, vmid, false, err)?;
    read_conf(node, vmid)?;
    if !runtime(node, vmid).running {
        return Err(SimError::die(format!("CT {vmid} not running")));
    }
    task::run_task(node, out, "vzshutdown", &vmid.to_string(), |_log| {
        sleep_ms(timeout_s * 1000);
        Err(SimError::die("container did not stop"))
    })
}

/// `pct reboot`.
pub fn reboot(node: &Node, vmid: u32, out: &mut String, err: &mut String) -> Result<TaskOutcome> {
    let _held = lock_ct(node, vmid, false, err)?;
    let (mut conf, _) = read_conf(node, vmid)?;
    let mut rt = runtime(node, vmid);
    if !rt.running {
        return Err(SimError::die(format!("VM {vmid} not running")));
    }
    task::run_task(node, out, "vzreboot", &vmid.to_string(), |_log| {
        check_lock(&conf)?;
        sleep_ms(node.cfg.latency.stop_ms + node.cfg.latency.start_ms);
        apply_pending(&mut conf);
        write_conf(node, vmid, &conf)?;
        if crate::lxc::is_lxc(node) {
            crate::lxc::stop(node, vmid, true)?;
            rt.pid = crate::lxc::start(node, vmid, &conf, _log)?;
        } else {
            assign_leases(node, vmid, &conf, &mut rt)?;
        }
        rt.started = now();
        save_runtime(node, vmid, &rt)
    })
}

fn owned_volumes(conf: &CtConf, vmid: u32) -> Vec<String> {
    let mut v = Vec::new();
    for (k, val) in conf.opts.iter().chain(conf.pending.iter()) {
        if is_disk_key(k) || k.starts_with("unused") {
            let vol = val
                .split(',')
                .next()
                .unwrap_or("")
                .trim_start_matches("volume=")
                .to_string();
            if vol.starts_with('/') || !vol.contains(':') {
                continue;
            }
            let owner = vol.split(':').nth(1).and_then(|n| {
                let f = n.rsplit('/').next()?;
                f.strip_prefix("vm-")
                    .or_else(|| f.strip_prefix("subvol-"))?
                    .split('-')
                    .next()?
                    .parse::<u32>()
                    .ok()
            });
            if owner == Some(vmid) && !v.contains(&vol) {
                v.push(vol);
            }
        }
    }
    v
}

/// `pct destroy`.
pub fn destroy(
    node: &Node,
    vmid: u32,
    force: bool,
    purge: bool,
    unreferenced: bool,
    out: &mut String,
    err: &mut String,
) -> Result<TaskOutcome> {
    // PVE runs these checks before taking the config lock (so `CT is locked (create)` comes at once during a
    // create) and again after it.
    let early = |conf: &CtConf| -> Result<()> {
        if conf
            .opts
            .get("protection")
            .map(|p| p == "1")
            .unwrap_or(false)
        {
            return Err(SimError::die(format!(
                "can't remove CT {vmid} - protection mode enabled"
            )));
        }
        check_lock(conf)?;
        if runtime(node, vmid).running && !force {
            return Err(SimError::die(format!(
                "unable to destroy CT {vmid} - container is running"
            )));
        }
        Ok(())
    };
    early(&read_conf(node, vmid)?.0)?;
    let _held = lock_ct(node, vmid, false, err)?;
    let (mut conf, _) = read_conf(node, vmid)?;
    early(&conf)?;
    let mut rt = runtime(node, vmid);
    task::run_task(node, out, "vzdestroy", &vmid.to_string(), |log| {
        if rt.running {
            log.line(format!("forced to stop CT {vmid} before destroying!"));
            rt.running = false;
            save_runtime(node, vmid, &rt)?;
        }
        if purge {
            log.line(format!("purging CT {vmid} from related configurations.."));
        }
        conf.opts.insert("lock".into(), "destroyed".into());
        write_conf(node, vmid, &conf)?;
        sleep_ms(node.cfg.latency.destroy_ms);
        if crate::lxc::is_lxc(node) {
            crate::lxc::destroy(node, vmid)?;
        }
        for v in owned_volumes(&conf, vmid) {
            if let Err(e) = storage::free(node, &v) {
                log.warn(format!("{e}"));
            }
        }
        if unreferenced {
            for st in node
                .cfg
                .storage
                .iter()
                .filter(|s| s.enabled && s.content.iter().any(|c| c == "rootdir"))
            {
                for v in storage::list(node, st, None, Some(vmid)) {
                    let _ = storage::free(node, &v.volid);
                }
            }
        }
        let _ = fs::remove_file(runtime_path(node, vmid));
        fs::remove_file(conf_path(node, vmid)).map_err(|e| SimError::io(conf_path(node, vmid), e))
    })
}

/// `pct resize`.
pub fn resize(
    node: &Node,
    vmid: u32,
    disk: &str,
    size: &str,
    out: &mut String,
    err: &mut String,
) -> Result<TaskOutcome> {
    let _held = lock_ct(node, vmid, false, err)?;
    let (mut conf, _) = read_conf(node, vmid)?;
    check_lock(&conf)?;
    let Some(cur) = conf.opts.get(disk).cloned() else {
        return Err(SimError::die(format!(
            "unable to parse config line '{disk}'"
        )));
    };
    let mut m = parse_prop(disk, &cur)?;
    let volid = m.get("volume").cloned().unwrap_or_default();
    let old = storage::size_of(node, &volid)?;
    let (add, num) = match size.strip_prefix('+') {
        Some(s) => (true, s),
        None => (false, size),
    };
    let n = parse_size(num)
        .ok_or_else(|| SimError::param("size", "value does not match the regex pattern"))?;
    let new = if add { old + n } else { n };
    if new < old {
        return Err(SimError::die("unable to shrink disk size"));
    }
    if new == old {
        return Err(SimError::die("disk is already at specified size"));
    }
    task::run_task(node, out, "resize", &vmid.to_string(), |_log| {
        storage::resize(node, &volid, new)?;
        if crate::lxc::is_lxc(node) {
            crate::lxc::grow(node, vmid, &volid)?;
        }
        m.insert("size".into(), format_size(new));
        m.remove("volume");
        m.insert("volume".into(), volid.clone());
        let first: &[&str] = if disk == "rootfs" {
            &["volume"]
        } else {
            &["volume", "mp"]
        };
        conf.opts.insert(disk.to_string(), print_prop(&m, first));
        write_conf(node, vmid, &conf)
    })
}

/// `chpasswd` inside a running CT (memory backend): every non-blank stdin line must be `user:password` for a
/// known user (only `root` exists); the password is recorded as its SHA-256 in the runtime state. Returns the
/// exit code and stderr of chpasswd (1 and `chpasswd: line N: ...` on bad input, nothing changed).
pub fn chpasswd(node: &Node, vmid: u32, input: &str) -> Result<(i32, String)> {
    use sha2::Digest;
    let mut errors = String::new();
    let mut set = BTreeMap::new();
    for (i, line) in input.lines().enumerate() {
        if line.is_empty() {
            continue;
        }
        let n = i + 1;
        match line.split_once(':') {
            None => errors.push_str(&format!("chpasswd: line {n}: missing new password\n")),
            Some((user, _)) if user != "root" => errors.push_str(&format!(
                "chpasswd: line {n}: user '{user}' does not exist\n"
            )),
            Some((user, pw)) => {
                set.insert(
                    user.to_string(),
                    hex::encode(sha2::Sha256::digest(pw.as_bytes())),
                );
            }
        }
    }
    if !errors.is_empty() {
        errors.push_str("chpasswd: error detected, changes ignored\n");
        return Ok((1, errors));
    }
    let _held = lock::lock_blocking(&node.state.join("lock").join(format!("runtime-{vmid}.lock")))?;
    let mut rt = runtime(node, vmid);
    rt.passwords.extend(set);
    save_runtime(node, vmid, &rt)?;
    Ok((0, String::new()))
}

/// `pct unlock`.
pub fn unlock(node: &Node, vmid: u32, err: &mut String) -> Result<()> {
    let _held = lock_ct(node, vmid, false, err)?;
    let (mut conf, _) = read_conf(node, vmid)?;
    if conf.opts.remove("lock").is_none() {
        return Err(SimError::die("no lock found trying to remove any lock"));
    }
    write_conf(node, vmid, &conf)
}

/// `pct migrate <vmid> <target> [--restart]` inside the simulated cluster: moves the config file (volumes are
/// moved to the same storage id of the target node).
pub fn migrate(
    node: &Node,
    vmid: u32,
    target: &str,
    restart: bool,
    online: bool,
    out: &mut String,
    err: &mut String,
) -> Result<TaskOutcome> {
    if target == node.name() {
        return Err(SimError::die("target is local node."));
    }
    if !node.cluster_nodes().iter().any(|n| n == target) {
        return Err(SimError::die(format!("no such cluster node '{target}'")));
    }
    let peer = node.peer(target)?;
    let _held = lock_ct(node, vmid, false, err)?;
    let (mut conf, _) = read_conf(node, vmid)?;
    check_lock(&conf)?;
    let rt = runtime(node, vmid);
    if rt.running && !restart && !online {
        return Err(SimError::die(
            "lxc live migration is currently not implemented",
        ));
    }
    if rt.running && online && !restart {
        return Err(SimError::die(
            "lxc live migration is currently not implemented",
        ));
    }
    task::run_task(node, out, "vzmigrate", &vmid.to_string(), |log| {
        log.line(format!(
            "starting migration of CT {vmid} to node '{target}'"
        ));
        if rt.running {
            log.line(format!("shutdown CT {vmid}"));
            if crate::lxc::is_lxc(node) {
                crate::lxc::stop(node, vmid, true)?;
            }
        }
        conf.opts.insert("lock".into(), "migrate".into());
        write_conf(node, vmid, &conf)?;
        for v in owned_volumes(&conf, vmid) {
            let src = storage::volume_path(node, &v)?;
            let dst = storage::volume_path(&peer, &v)?;
            if let Some(d) = dst.parent() {
                fs::create_dir_all(d).map_err(|e| SimError::io(d, e))?;
            }
            fs::rename(&src, &dst)
                .or_else(|_| fs::copy(&src, &dst).and_then(|_| fs::remove_file(&src)))
                .map_err(|e| SimError::io(&src, e))?;
            log.line(format!("volume '{v}' is '{v}' on the target"));
        }
        conf.opts.remove("lock");
        write_conf(&peer, vmid, &conf)?;
        fs::remove_file(conf_path(node, vmid))
            .map_err(|e| SimError::io(conf_path(node, vmid), e))?;
        let _ = fs::remove_file(runtime_path(node, vmid));
        if crate::lxc::is_lxc(node) {
            crate::lxc::migrate(node, &peer, vmid)?;
        }
        if rt.running && crate::lxc::is_lxc(&peer) {
            let mut rt2 = rt.clone();
            rt2.pid = crate::lxc::start(&peer, vmid, &conf, log)?;
            rt2.started = now();
            save_runtime(&peer, vmid, &rt2)?;
            log.line(format!("start CT {vmid} on node '{target}'"));
        } else if rt.running {
            let mut rt2 = rt.clone();
            assign_leases(&peer, vmid, &conf, &mut rt2)?;
            rt2.started = now();
            save_runtime(&peer, vmid, &rt2)?;
            log.line(format!("start CT {vmid} on node '{target}'"));
        }
        log.line("migration finished successfully (duration 00:00:01)");
        Ok(())
    })
}

/// `vmstatus` for one CT: the fields of `/nodes/{node}/lxc` and `pct status --verbose`.
pub fn vmstatus(node: &Node, vmid: u32, conf: &CtConf) -> Value {
    let rt = runtime(node, vmid);
    let o = &conf.opts;
    let int = |k: &str| o.get(k).and_then(|v| v.parse::<u64>().ok());
    let memory = int("memory").unwrap_or(512) << 20;
    let swap = int("swap").map(|s| s << 20).unwrap_or(0);
    let cpus: Value = if let Some(c) = int("cores") {
        json!(c)
    } else if let Some(c) = o
        .get("cpulimit")
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|c| *c > 0.0)
    {
        json!(c)
    } else {
        json!(node.cfg.cores)
    };
    let rootsize = o
        .get("rootfs")
        .and_then(|r| r.split(',').find_map(|p| p.strip_prefix("size=")))
        .and_then(parse_size)
        .unwrap_or(4 * GIB);
    let name = o
        .get("hostname")
        .map(|h| h.split_whitespace().collect::<String>())
        .unwrap_or_else(|| format!("CT{vmid}"));
    let mut v = json!({
        "vmid": vmid, "name": name, "type": "lxc", "status": if rt.running { "running" } else { "stopped" },
        "cpus": cpus, "maxmem": memory, "maxswap": swap, "maxdisk": rootsize, "cpu": 0,
        "mem": 0, "swap": 0, "disk": 0, "uptime": 0, "netin": 0, "netout": 0, "diskread": 0, "diskwrite": 0,
    });
    if rt.running {
        v["mem"] = json!((memory / 16).min(96 << 20));
        v["disk"] = json!(rootsize / 6);
        v["uptime"] = json!(now().saturating_sub(rt.started));
        v["pid"] = json!(rt.pid);
        if crate::lxc::is_lxc(node) {
            crate::lxc::stats(node, vmid, &mut v);
        }
        for k in [
            "pressurecpusome",
            "pressurecpufull",
            "pressureiosome",
            "pressureiofull",
            "pressurememorysome",
            "pressurememoryfull",
        ] {
            v[k] = json!("0.00");
        }
    }
    if let Some(t) = o.get("tags") {
        v["tags"] = json!(t);
    }
    if let Some(l) = o.get("lock") {
        v["lock"] = json!(l);
    }
    if o.get("template").map(|t| t == "1").unwrap_or(false) {
        v["template"] = json!(1);
    }
    v
}

/// All CTs of this node, by vmid.
pub fn list(node: &Node) -> Vec<(u32, CtConf)> {
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir(node.conf_dir()) else {
        return out;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(id) = name
            .strip_suffix(".conf")
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok(raw) = fs::read_to_string(e.path()) {
            out.push((id, CtConf::parse(&raw)));
        }
    }
    out.sort_by_key(|(id, _)| *id);
    out
}

fn mac_to_ll(mac: &str) -> String {
    let b: Vec<u8> = mac
        .split(':')
        .filter_map(|x| u8::from_str_radix(x, 16).ok())
        .collect();
    if b.len() != 6 {
        return "fe80::1".into();
    }
    format!(
        "fe80::{:x}:{:x}:{:x}:{:x}",
        ((b[0] ^ 2) as u16) << 8 | b[1] as u16,
        (b[2] as u16) << 8 | 0xff,
        0xfe00 | b[3] as u16,
        (b[4] as u16) << 8 | b[5] as u16
    )
}

/// `GET .../interfaces`: null when stopped; addresses from the config (static) or the simulated DHCP lease.
pub fn interfaces(node: &Node, vmid: u32) -> Result<Value> {
    let (conf, _) = read_conf(node, vmid)?;
    let rt = runtime(node, vmid);
    if !rt.running {
        return Ok(Value::Null);
    }
    if crate::lxc::is_lxc(node) {
        return Ok(crate::lxc::interfaces(node, vmid)?);
    }
    let mut out = vec![json!({
        "name": "lo", "hwaddr": "00:00:00:00:00:00", "hardware-address": "00:00:00:00:00:00",
        "inet": "127.0.0.1/8", "inet6": "::1/128",
        "ip-addresses": [
            {"ip-address": "127.0.0.1", "ip-address-type": "inet", "prefix": 8},
            {"ip-address": "::1", "ip-address-type": "inet6", "prefix": 128}
        ]
    })];
    for (k, v) in &conf.opts {
        if !is_net_key(k) {
            continue;
        }
        let Ok(m) = parse_prop(k, v) else { continue };
        let name = m.get("name").cloned().unwrap_or_default();
        let mac = m.get("hwaddr").cloned().unwrap_or_default().to_lowercase();
        let mut addrs: Vec<(String, &str, u32)> = Vec::new();
        let v4 = match m.get("ip").map(String::as_str) {
            Some("dhcp") => rt.leases.get(&name).cloned(),
            Some(ip) if ip.contains('/') => Some(ip.to_string()),
            _ => None,
        };
        if let Some(c) = v4 {
            let (a, p) = c.split_once('/').unwrap_or((&c, "32"));
            addrs.push((a.to_string(), "inet", p.parse().unwrap_or(32)));
        }
        if let Some(ip6) = m.get("ip6").filter(|x| x.contains('/')) {
            let (a, p) = ip6.split_once('/').unwrap_or((ip6, "128"));
            addrs.push((a.to_string(), "inet6", p.parse().unwrap_or(128)));
        }
        addrs.push((mac_to_ll(&mac), "inet6", 64));
        let mut e = json!({"name": name, "hwaddr": mac, "hardware-address": mac});
        if let Some((a, _, p)) = addrs.iter().rfind(|x| x.1 == "inet") {
            e["inet"] = json!(format!("{a}/{p}"));
        }
        if let Some((a, _, p)) = addrs.iter().rfind(|x| x.1 == "inet6") {
            e["inet6"] = json!(format!("{a}/{p}"));
        }
        e["ip-addresses"] = Value::Array(
            addrs
                .iter()
                .map(|(a, t, p)| json!({"ip-address": a, "ip-address-type": t, "prefix": p}))
                .collect(),
        );
        out.push(e);
    }
    Ok(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(format_size(8 * GIB), "8G");
        assert_eq!(format_size(512 << 20), "512M");
        assert_eq!(format_size(0), "0T");
        assert_eq!(parse_size("10G"), Some(10 * GIB));
        assert_eq!(parse_size("1024"), Some(1024));
    }

    #[test]
    fn tags_are_normalised() {
        assert_eq!(normalize_tags("web,Prod"), "prod;web");
    }

    #[test]
    fn link_local_from_mac() {
        assert_eq!(mac_to_ll("bc:24:11:5e:7a:01"), "fe80::be24:11ff:fe5e:7a01");
    }
}
