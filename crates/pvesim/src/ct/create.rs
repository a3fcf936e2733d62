//! `pct create` / `POST /nodes/{node}/lxc`: checks, the create task (with `lock: create`),
//! template unpacking stand-ins (ostype, host keys) and cleanup of a failed create.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

use super::power::start;
use super::values::{finish_disk, is_disk_key, normalize_value, plan_disk, DiskPlan};
use super::{
    conf_path, lock_ct, read_conf, runtime, runtime_path, save_runtime, sleep_ms, with_faults,
    write_conf,
};
use crate::ctconf::CtConf;
use crate::error::{Result, SimError};
use crate::faults;
use crate::lock;
use crate::node::Node;
use crate::storage;
use crate::task::{self, now, TaskLog, TaskOutcome};

pub(super) const CREATE_ONLY: &[&str] = &[
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

pub(super) fn ostype_of(template: &str) -> &'static str {
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

pub(super) fn fake_fingerprint(seed: &str) -> String {
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
    if let Some(pool) = p.get("pool") {
        crate::pools::check_exists(node, pool)?;
    }
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
            description = crate::ctconf::stored_description(v);
            continue;
        }
        if k == "hookscript" {
            // update_pct_config, before the config is locked
            storage::check_hookscript(node, v)?;
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
            if matches!(e, SimError::Killed(_)) {
                // died halfway: disks and the `lock: create` config stay
                return Err(e);
            }
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
    let password = p.get("password");
    if outcome.ok() && (!ssh_keys.is_empty() || password.is_some()) {
        // the post-create setup writes root's authorized_keys and shadow entry (the lxc backend has written them
        // into the rootfs; the record says what was set)
        let mut rt = runtime(node, vmid);
        rt.authorized_keys = ssh_keys;
        if let Some(pw) = password {
            rt.passwords
                .insert("root".into(), super::guest::password_hash(pw));
        }
        save_runtime(node, vmid, &rt)?;
    }
    // The API adds it to its pool after the create, before the start.
    if let (true, Some(pool)) = (outcome.ok(), p.get("pool")) {
        crate::pools::add_vm(node, vmid, pool)?;
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
pub(super) fn create_body(
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
    if let Some(f) = &node.cfg.faults.half_create {
        if faults::fire(node, "half_create", f.count)? {
            return Err(SimError::Killed(format!(
                "unable to create CT {vmid} - {}",
                f.message
            )));
        }
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

pub(super) fn uuid_like(seed: &str) -> String {
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
