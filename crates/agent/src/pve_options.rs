//! The one place where the agent's PVE option lists (`key`, `value` as PVE stores them, built by
//! [`crate::convert::spec_options`] and carried by operations) become pve's typed requests: [`create_spec`] (a
//! [`CreateSpec`] for `pct create`) and [`desired_spec`] (what an update wants, for [`ConfigChange::diff`]).
//! Values are read with pve's own parsers (booleans, property strings, sizes).

use pxfleet_pve::parse::{parse_bool, Features, MountPoint, NetConfig, Startup};
use pxfleet_pve::spec::MountVolume;
use pxfleet_pve::{ConfigChange, CreateSpec, MountPointSpec, PveError, RootfsSpec};

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
    } else {
        let (storage, size_gib) = storage_size(k, v, &m.volume)?;
        MountVolume::Storage { storage, size_gib }
    };
    let path =
        m.mp.filter(|p| !p.is_empty())
            .ok_or_else(|| bad(k, v, "missing mp=PATH"))?;
    Ok(MountPointSpec {
        volume,
        path,
        backup: m.backup,
        read_only: m.ro,
        mount_options: m
            .mountoptions
            .map(|o| {
                o.split(';')
                    .filter(|o| !o.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default(),
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
            "rootfs" => {}
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
            "tags" => s.tags = words(v),
            "description" => s.description = Some(v.to_string()),
            _ => {
                if let Some(i) = index(k, "net") {
                    s.nets
                        .insert(i, NetConfig::parse(v).map_err(|e| bad(k, v, e))?);
                } else if let Some(i) = index(k, "mp") {
                    s.mount_points.insert(i, mount_point(k, v)?);
                } else {
                    return Err(bad(k, v, "not an option pxagent sets at create"));
                }
            }
        }
    }
    Ok(())
}

/// What an update wants, typed for [`ConfigChange::diff`]: the desired options (only their in-place part is
/// compared: `rootfs`, `unprivileged` and their own `tags` / `description` are left out), with the tags and
/// description (the mark in it) to keep.
pub fn desired_spec(
    vmid: u32,
    options: &[(String, String)],
    tags: Vec<String>,
    description: String,
) -> Result<CreateSpec, PveError> {
    let rootfs = RootfsSpec {
        storage: String::new(),
        size_gib: 0,
    };
    let mut s = CreateSpec::new(vmid, "", rootfs);
    let options: Vec<(String, String)> = options
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "tags" | "description" | "rootfs" | "unprivileged"
            )
        })
        .cloned()
        .collect();
    apply_options(&mut s, &options)?;
    s.tags = tags;
    s.description = Some(description);
    Ok(s)
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
