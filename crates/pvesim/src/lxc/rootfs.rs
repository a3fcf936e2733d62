//! A container's root file system on the lxc backend: the volume is a sparse image file (the memory backend's
//! volume file, so `pvesm list` and the disk agree) holding ext4, which enforces the size. Create: mkfs, mount,
//! extract the template with tar, scrub and set up (PVE's post-create: hostname, hosts, network, SSH host keys,
//! authorized_keys, root password), shift ownership by the idmap base for unprivileged containers (a `lchown`
//! walk), unmount. Start: the same setup of hostname, hosts and network again (PVE does it at every start), and
//! the image stays mounted as the container's `dir:` rootfs until stop. Loop devices are pvesim's own, one per
//! image at most ([`Mounted`] says why). Every write stays inside the rootfs: symlinks in the
//! container are never followed out of it.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use super::config::InitKind;
use super::run::{argv, check, run};
use super::LxcError;

const T_MOUNT: Duration = Duration::from_secs(60);
const T_TAR: Duration = Duration::from_secs(900);

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LxcError + '_ {
    move |e| LxcError::Io {
        path: path.to_path_buf(),
        source: e,
    }
}

/// Host-wide lock file taken around every loop device lookup, attach, mount and detach pvesim does, by every
/// pvesim process and node on this host.
pub const LOOP_LOCK: &str = "/run/lock/pvesim-lxc-loop.lock";

/// Takes [`LOOP_LOCK`] (blocking); released when the file is dropped.
#[allow(clippy::incompatible_msrv)]
fn loop_lock() -> Result<fs::File, LxcError> {
    let p = Path::new(LOOP_LOCK);
    if let Some(dir) = p.parent() {
        fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(p)
        .map_err(io(p))?;
    f.lock().map_err(io(p))?;
    Ok(f)
}

/// The loop devices bound to `image` (`losetup -j`), including one whose detach is pending.
pub fn bound_loops(image: &Path) -> Result<Vec<String>, LxcError> {
    let o = check(
        &argv(&["losetup", "-j", &image.display().to_string()]),
        None,
        T_MOUNT,
    )?;
    Ok(o.stdout
        .lines()
        .filter_map(|l| l.split_once(':').map(|(d, _)| d.trim().to_string()))
        .filter(|d| d.starts_with("/dev/loop"))
        .collect())
}

/// The file behind loop device `dev` (sysfs), `None` when it is not bound.
fn backing_file(dev: &str) -> Option<PathBuf> {
    let n = dev.rsplit('/').next()?;
    let t = fs::read_to_string(format!("/sys/block/{n}/loop/backing_file")).ok()?;
    Some(PathBuf::from(t.trim_end().trim_end_matches(" (deleted)")))
}

/// The source device of the mount on `dir` in this mount namespace (the last one, as `umount` takes it).
fn mounted_source(dir: &Path) -> Option<String> {
    let want = dir.display().to_string().replace(' ', "\\040");
    fs::read_to_string("/proc/self/mounts")
        .ok()?
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() > 2 && f[1] == want).then(|| f[0].to_string())
        })
        .next_back()
}

/// An image mounted on a directory through a loop device of pvesim's; unmounted when dropped unless kept.
///
/// Why not `mount -o loop` and LXC's `loop:` backend: this host's mounts are private, and every new mount
/// namespace (each `lxc-start`, and each `lxc-*` pvesim runs inside a node's network namespace) takes a private
/// copy of all of them, including another container's rootfs mounted at that moment for create or start.
/// `umount` then only removes the host's view: the ext4 of that image stays alive, unsynced, on its old loop
/// device, and the next `mount -o loop` or LXC `loop:` put a second loop device and a second ext4 on the same
/// image: files extracted a moment earlier read as zeros ("Exec format error - Failed to exec /sbin/init") or the
/// mount fails ("Failed to mount rootfs"). Here an image has at most one loop device: under [`LOOP_LOCK`] the
/// device already bound to the image is reused (mounting it again gives the same, live ext4), and only an image
/// without one gets a new device (`losetup --find --show`, which retries when another process takes the free
/// device first).
pub struct Mounted {
    pub dir: PathBuf,
    /// The loop device, e.g. `/dev/loop3`.
    pub dev: String,
    keep: bool,
}

impl Mounted {
    /// Attaches `image` (or reuses its loop device) and mounts it on `dir` (created; an earlier mount there is
    /// released first).
    pub fn image(image: &Path, dir: &Path) -> Result<Mounted, LxcError> {
        fs::create_dir_all(dir).map_err(io(dir))?;
        release(dir)?;
        let canon = fs::canonicalize(image).map_err(io(image))?;
        let _l = loop_lock()?;
        let mut attempt = 0;
        let dev = loop {
            attempt += 1;
            let dev = match bound_loops(image)?.into_iter().next() {
                Some(d) => d,
                None => check(
                    &argv(&["losetup", "--find", "--show", &canon.display().to_string()]),
                    None,
                    T_MOUNT,
                )?
                .stdout
                .trim()
                .to_string(),
            };
            let a = argv(&["mount", "-t", "ext4", &dev, &dir.display().to_string()]);
            match check(&a, None, T_MOUNT) {
                Ok(_) => break dev,
                // a reused device whose pending detach completed between the lookup and the mount
                Err(_) if attempt < 3 && backing_file(&dev).is_none() => continue,
                Err(e) => return Err(e),
            }
        };
        let m = Mounted {
            dir: dir.to_path_buf(),
            dev: dev.clone(),
            keep: false,
        };
        // The mount holds the device now: it cannot be cleared or rebound under us. Make sure it is our image.
        match backing_file(&dev) {
            Some(b) if b == canon => Ok(m),
            other => Err(LxcError::Io {
                path: image.to_path_buf(),
                source: std::io::Error::other(format!(
                    "{dev} is bound to {} instead",
                    other
                        .map(|b| b.display().to_string())
                        .unwrap_or("nothing".into())
                )),
            }),
        }
    }

    /// Leaves the image mounted (the running container's rootfs); [`release`] undoes it.
    pub fn keep(mut self) -> String {
        self.keep = true;
        self.dev.clone()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        let d = self.dir.display().to_string();
        let ok = run(&argv(&["umount", &d]), None, T_MOUNT)
            .map(|o| o.ok())
            .unwrap_or(false);
        if !ok {
            tracing::warn!(dir = %d, "umount failed, detaching lazily");
            let _ = run(&argv(&["umount", "-l", &d]), None, T_MOUNT);
        }
    }
}

/// Unmounts whatever pvesim mounted on `dir` and detaches its loop device (under [`LOOP_LOCK`]). A device still
/// held elsewhere (a mount namespace copy) is detached by the kernel once released; until then a new mount of the
/// image reuses it.
pub fn release(dir: &Path) -> Result<(), LxcError> {
    while let Some(src) = mounted_source(dir) {
        let d = dir.display().to_string();
        let o = run(&argv(&["umount", &d]), None, T_MOUNT)?;
        if !o.ok() {
            tracing::warn!(dir = %d, stderr = %o.stderr.trim(), "umount failed, detaching lazily");
            check(&argv(&["umount", "-l", &d]), None, T_MOUNT)?;
        }
        if src.starts_with("/dev/loop") {
            detach(&src)?;
        }
    }
    Ok(())
}

/// Detaches every loop device bound to `image` (under [`LOOP_LOCK`]).
pub fn detach_image(image: &Path) -> Result<(), LxcError> {
    for dev in bound_loops(image)? {
        detach(&dev)?;
    }
    Ok(())
}

fn detach(dev: &str) -> Result<(), LxcError> {
    let _l = loop_lock()?;
    if backing_file(dev).is_some() {
        let o = run(&argv(&["losetup", "-d", dev]), None, T_MOUNT)?;
        if !o.ok() && backing_file(dev).is_some() {
            tracing::warn!(dev, stderr = %o.stderr.trim(), "losetup -d failed");
        }
    }
    Ok(())
}

/// Makes an ext4 file system on the volume image; its root directory owned by `owner`.
pub fn mkfs(image: &Path, owner: u32) -> Result<(), LxcError> {
    check(
        &argv(&[
            "mkfs.ext4",
            "-q",
            "-F",
            "-E",
            &format!("root_owner={owner}:{owner}"),
            &image.display().to_string(),
        ]),
        None,
        T_MOUNT,
    )?;
    Ok(())
}

/// Extracts a `.tar[.zst|.xz|.gz|.bz2]` template into `dir` as root, numeric owners kept. Returns tar's
/// `Total bytes read` line.
pub fn extract(template: &Path, dir: &Path) -> Result<String, LxcError> {
    let name = template.to_string_lossy().to_ascii_lowercase();
    let z = if name.ends_with(".zst") {
        Some("--zstd")
    } else if name.ends_with(".xz") {
        Some("-J")
    } else if name.ends_with(".gz") {
        Some("-z")
    } else if name.ends_with(".bz2") {
        Some("-j")
    } else {
        None
    };
    let mut a = argv(&[
        "tar",
        "-C",
        &dir.display().to_string(),
        "--numeric-owner",
        "--totals",
        "--xattrs",
        "--xattrs-include=user.*",
        "--xattrs-include=security.capability",
    ]);
    a.extend(z.map(String::from));
    a.extend(argv(&["-xpf", &template.display().to_string()]));
    let o = check(&a, None, T_TAR)?;
    Ok(o.stderr
        .lines()
        .find(|l| l.starts_with("Total bytes read"))
        .unwrap_or("")
        .to_string())
}

/// Resolves `rel` inside `root` the way the container would see it: symlinks (absolute ones relative to `root`)
/// are followed but never leave `root`. The result may not exist.
pub fn resolve_in(root: &Path, rel: &str) -> PathBuf {
    let mut todo: Vec<String> = rel
        .split('/')
        .filter(|c| !c.is_empty())
        .map(String::from)
        .rev()
        .collect();
    let mut cur: Vec<String> = Vec::new();
    let mut hops = 0;
    while let Some(c) = todo.pop() {
        match c.as_str() {
            "." => continue,
            ".." => {
                cur.pop();
                continue;
            }
            _ => {}
        }
        let p = cur
            .iter()
            .fold(root.to_path_buf(), |p, c| p.join(c))
            .join(&c);
        match fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() && hops < 40 => {
                hops += 1;
                let t = fs::read_link(&p).unwrap_or_default();
                if t.is_absolute() {
                    cur.clear();
                }
                for comp in t.components().rev() {
                    if let Component::Normal(s) = comp {
                        todo.push(s.to_string_lossy().to_string());
                    } else if comp == Component::ParentDir {
                        todo.push("..".into());
                    }
                }
            }
            _ => cur.push(c),
        }
    }
    cur.iter().fold(root.to_path_buf(), |p, c| p.join(c))
}

/// Writes `data` to `rel` inside `root` with `mode`, owned by `owner` (uid = gid). Missing parent directories are
/// made (0755, same owner); a symlink at the final component is replaced, never written through.
pub fn write_in(
    root: &Path,
    rel: &str,
    data: &[u8],
    mode: u32,
    owner: u32,
) -> Result<(), LxcError> {
    let (parent, file) = rel.rsplit_once('/').unwrap_or(("", rel));
    let dir = resolve_in(root, parent);
    if !dir.starts_with(root) {
        return Err(LxcError::Io {
            path: dir,
            source: std::io::Error::other("outside the container root"),
        });
    }
    if !dir.exists() {
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        let mut d = dir.as_path();
        while d != root {
            let _ = std::os::unix::fs::lchown(d, Some(owner), Some(owner));
            d = d.parent().unwrap_or(root);
        }
    }
    let path = dir.join(file);
    if fs::symlink_metadata(&path)
        .map(|m| m.file_type().is_symlink())
        .unwrap_or(false)
    {
        fs::remove_file(&path).map_err(io(&path))?;
    }
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(io(&path))?;
    f.write_all(data).map_err(io(&path))?;
    fs::set_permissions(&path, fs::Permissions::from_mode(mode)).map_err(io(&path))?;
    std::os::unix::fs::lchown(&path, Some(owner), Some(owner)).map_err(io(&path))
}

/// Reads `rel` inside `root` (confined like [`write_in`]); `None` when missing.
pub fn read_in(root: &Path, rel: &str) -> Option<String> {
    let p = resolve_in(root, rel);
    if !p.starts_with(root) {
        return None;
    }
    fs::read_to_string(p).ok()
}

/// Adds `offset` to the owner and group of every entry under `root` (symlinks not followed, hard links once,
/// setuid/setgid bits restored after the chown cleared them). Stays on `root`'s file system.
pub fn shift_ids(root: &Path, offset: u32) -> Result<(), LxcError> {
    let dev = fs::symlink_metadata(root).map_err(io(root))?.dev();
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = fs::symlink_metadata(&p).map_err(io(&p))?;
        if m.dev() != dev {
            continue;
        }
        if !m.is_dir() && m.nlink() > 1 && !seen.insert(m.ino()) {
            continue;
        }
        if m.uid() < offset {
            std::os::unix::fs::lchown(&p, Some(m.uid() + offset), Some(m.gid() + offset))
                .map_err(io(&p))?;
            if !m.file_type().is_symlink() && m.mode() & 0o6000 != 0 {
                fs::set_permissions(&p, fs::Permissions::from_mode(m.mode() & 0o7777))
                    .map_err(io(&p))?;
            }
        }
        if m.is_dir() {
            for e in fs::read_dir(&p).map_err(io(&p))? {
                stack.push(e.map_err(io(&p))?.path());
            }
        }
    }
    Ok(())
}

/// systemd or something else, from where `/sbin/init` leads.
pub fn init_kind(root: &Path) -> InitKind {
    let p = resolve_in(root, "sbin/init");
    if p.to_string_lossy().contains("systemd") {
        InitKind::Systemd
    } else {
        InitKind::Other
    }
}

/// What PVE's setup writes at create and at every start.
#[derive(Debug, Clone, Default)]
pub struct Identity {
    pub hostname: String,
    /// (interface name, ipv4 setting: `dhcp`, `manual` or CIDR, gateway, ipv6 setting, gateway6)
    pub nets: Vec<NetSetup>,
    pub nameserver: Option<String>,
    pub searchdomain: Option<String>,
}

/// One interface as the container's network stack configures it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NetSetup {
    pub name: String,
    pub ip: Option<String>,
    pub gw: Option<String>,
    pub ip6: Option<String>,
    pub gw6: Option<String>,
}

/// `/etc/network/interfaces` as PVE writes it for Debian (ifupdown).
pub fn interfaces_file(nets: &[NetSetup]) -> String {
    let mut s = String::from("auto lo\niface lo inet loopback\n");
    for n in nets {
        match n.ip.as_deref() {
            Some("dhcp") => s.push_str(&format!("\nauto {0}\niface {0} inet dhcp\n", n.name)),
            Some(ip) if ip.contains('/') => {
                s.push_str(&format!(
                    "\nauto {0}\niface {0} inet static\n\taddress {ip}\n",
                    n.name
                ));
                if let Some(g) = &n.gw {
                    s.push_str(&format!("\tgateway {g}\n"));
                }
            }
            _ => s.push_str(&format!("\nauto {0}\niface {0} inet manual\n", n.name)),
        }
        match n.ip6.as_deref() {
            Some("dhcp") => s.push_str(&format!("iface {} inet6 dhcp\n", n.name)),
            Some("auto") => s.push_str(&format!("iface {} inet6 auto\n", n.name)),
            Some(ip) if ip.contains('/') => {
                s.push_str(&format!("iface {} inet6 static\n\taddress {ip}\n", n.name));
                if let Some(g) = &n.gw6 {
                    s.push_str(&format!("\tgateway {g}\n"));
                }
            }
            _ => {}
        }
    }
    s
}

/// `/etc/hosts` with PVE's block (the hostname on 127.0.1.1) replacing an earlier one.
pub fn hosts_file(old: &str, hostname: &str) -> String {
    let mut out = String::new();
    let mut skip = false;
    for l in old.lines() {
        if l.trim() == "# --- BEGIN PVE ---" {
            skip = true;
            continue;
        }
        if l.trim() == "# --- END PVE ---" {
            skip = false;
            continue;
        }
        if !skip && !l.split_whitespace().skip(1).any(|h| h == hostname) {
            out.push_str(l);
            out.push('\n');
        }
    }
    if !out.contains("localhost") {
        out.insert_str(
            0,
            "127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n",
        );
    }
    let short = hostname.split('.').next().unwrap_or(hostname);
    let names = if short == hostname {
        hostname.to_string()
    } else {
        format!("{hostname} {short}")
    };
    out.push_str(&format!(
        "# --- BEGIN PVE ---\n127.0.1.1 {names}\n# --- END PVE ---\n"
    ));
    out
}

/// Writes hostname, hosts, network config and (when set) resolv.conf into the mounted rootfs.
pub fn setup_identity(root: &Path, id: &Identity, owner: u32) -> Result<(), LxcError> {
    write_in(
        root,
        "etc/hostname",
        format!("{}\n", id.hostname).as_bytes(),
        0o644,
        owner,
    )?;
    let old = read_in(root, "etc/hosts").unwrap_or_default();
    write_in(
        root,
        "etc/hosts",
        hosts_file(&old, &id.hostname).as_bytes(),
        0o644,
        owner,
    )?;
    write_in(
        root,
        "etc/network/interfaces",
        interfaces_file(&id.nets).as_bytes(),
        0o644,
        owner,
    )?;
    if id.nameserver.is_some() || id.searchdomain.is_some() {
        let mut r = String::from("# --- BEGIN PVE ---\n");
        if let Some(s) = &id.searchdomain {
            r.push_str(&format!("search {s}\n"));
        }
        for n in id.nameserver.iter().flat_map(|n| n.split_whitespace()) {
            r.push_str(&format!("nameserver {n}\n"));
        }
        r.push_str("# --- END PVE ---\n");
        write_in(root, "etc/resolv.conf", r.as_bytes(), 0o644, owner)?;
    }
    Ok(())
}

/// Puts `keys` into `/root/.ssh/authorized_keys` (0600, directory 0700, owned by container root).
pub fn setup_ssh_keys(root: &Path, keys: &str, owner: u32) -> Result<(), LxcError> {
    let mut k = keys.trim_end().to_string();
    k.push('\n');
    write_in(
        root,
        "root/.ssh/authorized_keys",
        k.as_bytes(),
        0o600,
        owner,
    )?;
    let d = resolve_in(root, "root/.ssh");
    fs::set_permissions(&d, fs::Permissions::from_mode(0o700)).map_err(io(&d))
}

/// Sets root's password hash in `/etc/shadow` (SHA-512 crypt, computed here: the password never leaves the
/// process).
pub fn setup_password(root: &Path, password: &str, owner: u32) -> Result<(), LxcError> {
    let hash = super::crypt::sha512_crypt(password);
    let days = crate::task::now() / 86400;
    let old = read_in(root, "etc/shadow").unwrap_or_default();
    let mut found = false;
    let mut out = String::new();
    for l in old.lines() {
        let mut f: Vec<String> = l.split(':').map(String::from).collect();
        if f.first().map(|u| u == "root").unwrap_or(false) && f.len() >= 3 {
            f[1] = hash.clone();
            f[2] = days.to_string();
            found = true;
        }
        out.push_str(&f.join(":"));
        out.push('\n');
    }
    if !found {
        out.push_str(&format!("root:{hash}:{days}:0:99999:7:::\n"));
    }
    write_in(root, "etc/shadow", out.as_bytes(), 0o640, owner)?;
    // shadow is root:shadow on Debian; keep the group the template had when it is there
    Ok(())
}

/// Replaces the template's SSH host keys with fresh ones (made with ssh-keygen in `scratch` on the host, then
/// copied in). Returns PVE-style log lines. Nothing happens when the template has no `/etc/ssh`.
pub fn setup_host_keys(
    root: &Path,
    scratch: &Path,
    hostname: &str,
    owner: u32,
) -> Result<Vec<String>, LxcError> {
    let sshdir = resolve_in(root, "etc/ssh");
    if !sshdir.starts_with(root) || !sshdir.is_dir() {
        return Ok(Vec::new());
    }
    for e in fs::read_dir(&sshdir).map_err(io(&sshdir))?.flatten() {
        if e.file_name().to_string_lossy().starts_with("ssh_host_") {
            let _ = fs::remove_file(e.path());
        }
    }
    let _ = fs::remove_dir_all(scratch);
    fs::create_dir_all(scratch).map_err(io(scratch))?;
    let mut log = Vec::new();
    for t in ["ecdsa", "ed25519"] {
        let f = scratch.join(format!("ssh_host_{t}_key"));
        log.push(format!(
            "Creating SSH host key 'ssh_host_{t}_key' - this may take some time ..."
        ));
        check(
            &argv(&[
                "ssh-keygen",
                "-q",
                "-t",
                t,
                "-N",
                "",
                "-C",
                &format!("root@{hostname}"),
                "-f",
                &f.display().to_string(),
            ]),
            None,
            T_MOUNT,
        )?;
        let fp = check(
            &argv(&["ssh-keygen", "-l", "-f", &format!("{}.pub", f.display())]),
            None,
            T_MOUNT,
        )?;
        let fp = fp
            .stdout
            .split_whitespace()
            .nth(1)
            .unwrap_or("")
            .to_string();
        log.push(format!("done: {fp} root@{hostname}"));
        let key = fs::read(&f).map_err(io(&f))?;
        let pubf = f.with_extension("pub");
        let pubk = fs::read(scratch.join(format!("ssh_host_{t}_key.pub"))).map_err(io(&pubf))?;
        write_in(
            root,
            &format!("etc/ssh/ssh_host_{t}_key"),
            &key,
            0o600,
            owner,
        )?;
        write_in(
            root,
            &format!("etc/ssh/ssh_host_{t}_key.pub"),
            &pubk,
            0o644,
            owner,
        )?;
    }
    let _ = fs::remove_dir_all(scratch);
    Ok(log)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_never_leave_the_root() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        let outside = d.path().join("outside");
        fs::create_dir_all(root.join("etc")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("victim"), "keep").unwrap();
        // absolute and relative escapes
        std::os::unix::fs::symlink(outside.join("victim"), root.join("etc/hostname")).unwrap();
        std::os::unix::fs::symlink("/", root.join("etc/abs")).unwrap();
        std::os::unix::fs::symlink("../../outside", root.join("etc/rel")).unwrap();
        let me = fs::metadata("/proc/self").unwrap().uid();
        write_in(&root, "etc/hostname", b"h\n", 0o644, me).unwrap();
        assert_eq!(fs::read_to_string(outside.join("victim")).unwrap(), "keep");
        assert_eq!(
            fs::read_to_string(root.join("etc/hostname")).unwrap(),
            "h\n"
        );
        assert_eq!(resolve_in(&root, "etc/abs/etc"), root.join("etc"));
        assert!(resolve_in(&root, "etc/rel/victim").starts_with(&root));
    }

    #[test]
    fn network_files_as_pve_writes_them() {
        let nets = vec![
            NetSetup {
                name: "eth0".into(),
                ip: Some("10.77.0.10/24".into()),
                gw: Some("10.77.0.1".into()),
                ..Default::default()
            },
            NetSetup {
                name: "eth1".into(),
                ip: Some("dhcp".into()),
                ..Default::default()
            },
        ];
        assert_eq!(
            interfaces_file(&nets),
            "auto lo\niface lo inet loopback\n\nauto eth0\niface eth0 inet static\n\taddress 10.77.0.10/24\n\tgateway 10.77.0.1\n\nauto eth1\niface eth1 inet dhcp\n"
        );
        let h = hosts_file("127.0.0.1 localhost\n127.0.1.1 old\n", "web1.example");
        assert!(
            h.ends_with("# --- BEGIN PVE ---\n127.0.1.1 web1.example web1\n# --- END PVE ---\n"),
            "{h}"
        );
        assert_eq!(hosts_file(&h, "web1.example"), h, "idempotent");
    }

    #[test]
    fn password_lands_in_shadow_as_sha512_crypt() {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir_all(d.path().join("etc")).unwrap();
        fs::write(
            d.path().join("etc/shadow"),
            "root:*:19000:0:99999:7:::\nbin:*:19000:0:99999:7:::\n",
        )
        .unwrap();
        let me = fs::metadata("/proc/self").unwrap().uid();
        setup_password(d.path(), "s3cret", me).unwrap();
        let s = fs::read_to_string(d.path().join("etc/shadow")).unwrap();
        let hash = s.lines().next().unwrap().split(':').nth(1).unwrap();
        assert!(hash.starts_with("$6$"), "{s}");
        assert!(!s.contains("s3cret"));
        let salt = hash.split('$').nth(2).unwrap();
        assert_eq!(
            super::super::crypt::sha512_crypt_with_salt("s3cret", salt),
            hash
        );
        assert!(s.contains("\nbin:*:19000:0:99999:7:::\n"));
    }

    #[test]
    fn init_kind_follows_symlinks_inside() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        fs::create_dir_all(r.join("usr/sbin")).unwrap();
        fs::create_dir_all(r.join("lib/systemd")).unwrap();
        std::os::unix::fs::symlink("usr/sbin", r.join("sbin")).unwrap();
        assert_eq!(init_kind(r), InitKind::Other);
        std::os::unix::fs::symlink("/lib/systemd/systemd", r.join("usr/sbin/init")).unwrap();
        assert_eq!(init_kind(r), InitKind::Systemd);
    }
}
