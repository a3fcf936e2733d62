//! PVE's setup inside a root file system, at create and at every start: hostname, hosts file,
//! network interfaces, SSH host keys, authorized_keys and the root password.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::image::T_MOUNT;
use super::{io, read_in, resolve_in, write_in};
use crate::lxc::run::{argv, check};
use crate::lxc::LxcError;

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
    let hash = crate::lxc::crypt::sha512_crypt(password);
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
