//! The one place where PVE option lists (`key`, `value` as PVE stores them) become pve's typed requests and
//! back: [`options_spec`] (the typed options operations carry), [`options_text`] (the other way), [`create_spec`]
//! (a whole [`CreateSpec`], for in-memory nodes and tests) and the options an in-memory node stores for a typed
//! create or change ([`create_options`], [`set_options`]).
//! Values are read with pve's own parsers (booleans, property strings, sizes).

use pxfleet_pve::parse::{parse_bool, Features, MountPoint, NetConfig, Startup};
use pxfleet_pve::spec::MountVolume;
use pxfleet_pve::{ConfigChange, CreateSpec, DeviceSpec, MountPointSpec, PveError, RootfsSpec};

/// A create's inputs as options, before they are typed: what the executor has from the operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateArgs {
    pub vmid: u32,
    /// Template volume id, `STORAGE:vztmpl/FILE`.
    pub ostemplate: String,
    /// `--key value` pairs without the dashes, in order (hostname, memory, net0, rootfs, tags, description ...).
    pub options: Vec<(String, String)>,
    /// SSH public keys (key text, one per entry).
    pub ssh_public_keys: Vec<String>,
}

fn bad(key: &str, value: &str, why: impl std::fmt::Display) -> PveError {
    PveError::Invalid {
        vmid: None,
        field: format!("option {key}"),
        value: value.to_string(),
        expected: why.to_string(),
    }
}

fn num<T: std::str::FromStr>(k: &str, v: &str) -> Result<T, PveError> {
    v.trim().parse().map_err(|_| bad(k, v, "not a number"))
}

/// A PVE boolean as PVE reads it (`1/yes/on/true`, `0/no/off/false`).
fn flag(k: &str, v: &str) -> Result<bool, PveError> {
    parse_bool(v.trim())
        .ok_or_else(|| bad(k, v, "not a PVE boolean (1/0, yes/no, on/off, true/false)"))
}

fn index(key: &str, prefix: &str) -> Option<u32> {
    key.strip_prefix(prefix)?.parse().ok()
}

fn words(v: &str) -> Vec<String> {
    v.split([' ', ',', ';'])
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

fn storage_size(k: &str, v: &str, volume: &str) -> Result<(String, u32), PveError> {
    let (storage, size) = volume
        .split_once(':')
        .ok_or_else(|| bad(k, v, "expected STORAGE:GiB"))?;
    Ok((storage.to_string(), num(k, size)?))
}

fn mount_point(k: &str, v: &str) -> Result<MountPointSpec, PveError> {
    let m = MountPoint::parse(v).map_err(|e| bad(k, v, e))?;
    let volume = if m.volume.starts_with('/') {
        MountVolume::Bind {
            host_path: m.volume.clone(),
        }
    } else if m
        .volume
        .split_once(':')
        .is_some_and(|(_, n)| n.parse::<f64>().is_err())
    {
        MountVolume::Existing {
            volume: m.volume.clone(),
        }
    } else {
        let (storage, size_gib) = storage_size(k, v, &m.volume)?;
        MountVolume::Storage { storage, size_gib }
    };
    let path =
        m.mp.clone()
            .filter(|p| !p.is_empty())
            .ok_or_else(|| bad(k, v, "missing mp=PATH"))?;
    Ok(MountPointSpec {
        volume,
        path,
        backup: m.backup,
        read_only: m.ro,
        mount_options: m.mount_option_list(),
        acl: m.acl,
        quota: m.quota,
        replicate: m.replicate,
        shared: m.shared,
        keepattrs: m.keepattrs,
        idmap: m.idmap,
    })
}

/// Maps a create's options onto a typed create request.
pub fn create_spec(args: &CreateArgs) -> Result<CreateSpec, PveError> {
    let rootfs = args
        .options
        .iter()
        .find(|(k, _)| k == "rootfs")
        .map(|(k, v)| storage_size(k, v, v.split(',').next().unwrap_or("")))
        .transpose()?
        .map(|(storage, size_gib)| RootfsSpec { storage, size_gib })
        .ok_or_else(|| PveError::Invalid {
            vmid: Some(args.vmid),
            field: "rootfs".into(),
            value: "<none>".into(),
            expected: "a rootfs option".into(),
        })?;
    let mut s = CreateSpec::new(args.vmid, &args.ostemplate, rootfs);
    s.ssh_public_keys = args.ssh_public_keys.clone();
    apply_options(&mut s, &args.options)?;
    Ok(s)
}

/// Reads `options` into `s` (`rootfs` is read by the caller).
fn apply_options(s: &mut CreateSpec, options: &[(String, String)]) -> Result<(), PveError> {
    for (k, v) in options {
        let (k, v) = (k.as_str(), v.as_str());
        match k {
            // storage and size are read by the caller; the options here
            "rootfs" => {
                let m = pxfleet_pve::parse::MountPoint::parse(v).map_err(|e| bad(k, v, e))?;
                s.rootfs_options = pxfleet_pve::spec::RootfsOptions::of(&m);
            }
            "hostname" => s.hostname = Some(v.to_string()),
            "cores" => s.cores = Some(num(k, v)?),
            "cpulimit" => s.cpulimit = Some(num(k, v)?),
            "cpuunits" => s.cpuunits = Some(num(k, v)?),
            "memory" => s.memory = Some(num(k, v)?),
            "swap" => s.swap = Some(num(k, v)?),
            "unprivileged" => s.unprivileged = flag(k, v)?,
            "features" => s.features = Features::parse(v).map_err(|e| bad(k, v, e))?,
            "nameserver" => s.nameservers = words(v),
            "searchdomain" => s.searchdomains = words(v),
            "startup" => s.startup = Some(Startup::parse(v).map_err(|e| bad(k, v, e))?),
            "onboot" => s.onboot = Some(flag(k, v)?),
            "protection" => s.protection = Some(flag(k, v)?),
            "ostype" => s.ostype = Some(v.to_string()),
            "env" => s.env = Some(pxfleet_pve::runtime::parse_env(v)),
            "entrypoint" => s.entrypoint = Some(v.to_string()),
            "arch" => s.arch = Some(v.to_string()),
            "timezone" => s.timezone = Some(v.to_string()),
            "console" => s.console = Some(flag(k, v)?),
            "tty" => s.tty = Some(num(k, v)?),
            "cmode" => s.cmode = Some(v.to_string()),
            "hookscript" => s.hookscript = Some(v.to_string()),
            "pool" => s.pool = Some(v.to_string()),
            "tags" => s.tags = words(v),
            "description" => s.description = Some(v.to_string()),
            "lxc.idmap" => s.idmap.push(v.trim().to_string()),
            _ => {
                if let Some(i) = index(k, "net") {
                    s.nets
                        .insert(i, NetConfig::parse(v).map_err(|e| bad(k, v, e))?);
                } else if let Some(i) = index(k, "mp") {
                    s.mount_points.insert(i, mount_point(k, v)?);
                } else if let Some(i) = index(k, "dev") {
                    s.devices
                        .insert(i, DeviceSpec::parse(v).map_err(|e| bad(k, v, e))?);
                } else {
                    return Err(bad(k, v, "not an option pxagent sets at create"));
                }
            }
        }
    }
    Ok(())
}

/// A `[key, value]` option list (as PVE stores them) typed: a [`CreateSpec`] whose `vmid` and `template` are left
/// empty (they are the operation's) and whose `rootfs` has an empty storage when the options have none.
pub fn options_spec(options: &[(String, String)]) -> Result<CreateSpec, PveError> {
    let rootfs = options
        .iter()
        .find(|(k, _)| k == "rootfs")
        .map(|(k, v)| storage_size(k, v, v.split(',').next().unwrap_or("")))
        .transpose()?
        .map(|(storage, size_gib)| RootfsSpec { storage, size_gib })
        .unwrap_or(RootfsSpec {
            storage: String::new(),
            size_gib: 0,
        });
    let mut s = CreateSpec::new(0, "", rootfs);
    apply_options(&mut s, options)?;
    Ok(s)
}

fn b01(b: bool) -> String {
    if b { "1" } else { "0" }.to_string()
}

/// A [`CreateSpec`] as PVE options (`vmid`, `template` and SSH keys left out), as PVE would store them: how tests
/// state what a converted spec holds ([`options_spec`] reads it back).
pub fn options_text(s: &CreateSpec) -> Vec<(String, String)> {
    let mut o: Vec<(String, String)> = Vec::new();
    let mut push = |k: &str, v: String| o.push((k.to_string(), v));
    if let Some(h) = &s.hostname {
        push("hostname", h.clone());
    }
    if let Some(c) = s.cores {
        push("cores", c.to_string());
    }
    if let Some(l) = s.cpulimit {
        push("cpulimit", l.to_string());
    }
    if let Some(u) = s.cpuunits {
        push("cpuunits", u.to_string());
    }
    if let Some(m) = s.memory {
        push("memory", m.to_string());
    }
    if let Some(m) = s.swap {
        push("swap", m.to_string());
    }
    if !s.rootfs.storage.is_empty() {
        let volume = format!("{}:{}", s.rootfs.storage, s.rootfs.size_gib);
        push(
            "rootfs",
            s.rootfs_options
                .applied_to(&pxfleet_pve::parse::MountPoint {
                    volume,
                    ..Default::default()
                })
                .to_property_string(),
        );
    }
    push("unprivileged", b01(s.unprivileged));
    if !s.features.is_empty() {
        push("features", s.features.to_property_string());
    }
    for (i, n) in &s.nets {
        push(&format!("net{i}"), n.to_property_string());
    }
    if !s.nameservers.is_empty() {
        push("nameserver", s.nameservers.join(" "));
    }
    if !s.searchdomains.is_empty() {
        push("searchdomain", s.searchdomains.join(" "));
    }
    if let Some(st) = &s.startup {
        push("startup", st.to_property_string());
    }
    if let Some(b) = s.onboot {
        push("onboot", b01(b));
    }
    if let Some(t) = &s.ostype {
        push("ostype", t.clone());
    }
    if let Some(env) = &s.env {
        let vars: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        push("env", vars.join("\0"));
    }
    if let Some(e) = &s.entrypoint {
        push("entrypoint", e.clone());
    }
    if let Some(a) = &s.arch {
        push("arch", a.clone());
    }
    if let Some(t) = &s.timezone {
        push("timezone", t.clone());
    }
    if let Some(b) = s.console {
        push("console", b01(b));
    }
    if let Some(t) = s.tty {
        push("tty", t.to_string());
    }
    if let Some(m) = &s.cmode {
        push("cmode", m.clone());
    }
    if let Some(p) = &s.pool {
        push("pool", p.clone());
    }
    if let Some(h) = &s.hookscript {
        push("hookscript", h.clone());
    }
    if let Some(b) = s.protection {
        push("protection", b01(b));
    }
    for (i, m) in &s.mount_points {
        let volume = match &m.volume {
            MountVolume::Storage { storage, size_gib } => format!("{storage}:{size_gib}"),
            MountVolume::Bind { host_path } => host_path.clone(),
            MountVolume::Existing { volume } => volume.clone(),
        };
        let v = m.property(volume);
        push(&format!("mp{i}"), v.to_property_string());
    }
    for (i, d) in &s.devices {
        push(&format!("dev{i}"), d.to_property_string());
    }
    for v in &s.idmap {
        push("lxc.idmap", v.clone());
    }
    if !s.tags.is_empty() {
        push("tags", s.tags.join(";"));
    }
    if let Some(d) = &s.description {
        push("description", d.clone());
    }
    o
}

/// The options a [`CreateSpec`] sends to `pct create` (`key`, `value`, as pve's argv builder renders and checks
/// them; SSH keys left out): what an in-memory node stores for a create.
pub fn create_options(spec: &CreateSpec) -> Result<Vec<(String, String)>, PveError> {
    let argv = pxfleet_pve::argv::create_args(spec, Some(std::path::Path::new("/dev/null")))?;
    // `create VMID TEMPLATE`, then `--key value` pairs.
    Ok(argv
        .get(3..)
        .unwrap_or_default()
        .chunks(2)
        .filter_map(|kv| match kv {
            [k, v] => Some((k.strip_prefix("--")?.to_string(), v.clone())),
            _ => None,
        })
        .filter(|(k, _)| k != "ssh-public-keys")
        .chain(
            spec.idmap
                .iter()
                .map(|v| ("lxc.idmap".to_string(), v.clone())),
        )
        .collect())
}

/// `(key, value)` pairs as PVE stores them.
pub type Options = Vec<(String, String)>;

/// What a [`ConfigChange`] sends to `pct set` (as pve's argv builder renders and checks it): the options to
/// set and the keys to delete (reverts left out): what an in-memory node applies for a change.
pub fn set_options(vmid: u32, change: &ConfigChange) -> Result<(Options, Vec<String>), PveError> {
    let argv = pxfleet_pve::argv::set_args(vmid, change)?;
    let mut options = Vec::new();
    let mut delete = Vec::new();
    // `set VMID`, then `--key value` pairs.
    for kv in argv.get(2..).unwrap_or_default().chunks(2) {
        let [k, v] = kv else { continue };
        match k.strip_prefix("--") {
            Some("delete") => delete.extend(v.split(',').map(String::from)),
            Some("revert") | None => {}
            Some(k) => options.push((k.to_string(), v.clone())),
        }
    }
    Ok((options, delete))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_map_onto_a_typed_create() {
        let args = CreateArgs {
            vmid: 2100,
            ostemplate: "local:vztmpl/u.tar.xz".into(),
            options: vec![
                ("hostname".into(), "web".into()),
                ("memory".into(), "4096".into()),
                ("swap".into(), "0".into()),
                ("rootfs".into(), "local-zfs:16".into()),
                ("unprivileged".into(), "1".into()),
                ("features".into(), "nesting=1".into()),
                (
                    "net0".into(),
                    "name=eth0,bridge=vmbr0,gw=192.168.7.1,ip=192.168.7.100/24,type=veth".into(),
                ),
                ("startup".into(), "order=3,up=60,down=60".into()),
                ("tags".into(), "pxfleet;web".into()),
                ("mp0".into(), "local-zfs:8,mp=/data,backup=yes".into()),
                (
                    "mp1".into(),
                    "/srv/shared,mp=/shared,mountoptions=noatime;nodev,ro=on".into(),
                ),
                ("onboot".into(), "true".into()),
            ],
            ssh_public_keys: vec!["ssh-ed25519 AAAA x".into()],
        };
        let s = create_spec(&args).unwrap();
        assert_eq!(s.rootfs.storage, "local-zfs");
        assert_eq!(s.rootfs.size_gib, 16);
        assert_eq!(s.memory, Some(4096));
        assert_eq!(s.swap, Some(0));
        assert!(s.features.nesting);
        assert_eq!(s.nets[&0].ip.as_deref(), Some("192.168.7.100/24"));
        assert_eq!(s.startup.as_ref().unwrap().order, Some(3));
        assert_eq!(s.tags, vec!["pxfleet", "web"]);
        assert_eq!(s.mount_points[&0].path, "/data");
        assert_eq!(s.mount_points[&0].backup, Some(true));
        assert_eq!(s.mount_points[&1].read_only, Some(true));
        assert_eq!(s.mount_points[&1].mount_options, vec!["noatime", "nodev"]);
        assert_eq!(s.onboot, Some(true));
        // mountoptions reach pct as PVE's own key.
        let argv = pxfleet_pve::argv::create_args(&s, Some(std::path::Path::new("/k"))).unwrap();
        assert!(
            argv.iter()
                .any(|a| a == "/srv/shared,mp=/shared,mountoptions=noatime;nodev,ro=1"),
            "{argv:?}"
        );
        let e = create_spec(&CreateArgs {
            options: vec![
                ("rootfs".into(), "local:4".into()),
                ("bogus".into(), "1".into()),
            ],
            ..args
        })
        .unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
    }

    #[test]
    fn create_options_are_what_pct_create_gets() {
        let args = CreateArgs {
            vmid: 2100,
            ostemplate: "local:vztmpl/u.tar.xz".into(),
            options: vec![
                ("hostname".into(), "web".into()),
                ("rootfs".into(), "local-zfs:16".into()),
                (
                    "description".into(),
                    "managed-by: pxfleet fleet=dev name=web\n".into(),
                ),
            ],
            ssh_public_keys: vec!["ssh-ed25519 AAAA x".into()],
        };
        let o: std::collections::BTreeMap<_, _> = create_options(&create_spec(&args).unwrap())
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(o["hostname"], "web");
        assert_eq!(o["rootfs"], "local-zfs:16");
        assert_eq!(o["description"], "managed-by: pxfleet fleet=dev name=web\n");
        assert_eq!(o["unprivileged"], "1");
        assert!(!o.contains_key("ssh-public-keys"));
    }
}
