//! Child processes of the lxc backend: always an argv (never a shell), always with a timeout, stdout and stderr
//! captured (into unlinked files, so a daemonising child such as `lxc-start` cannot hold a pipe open), and
//! optionally inside a node's network namespace. The namespace entry is the notes' `node-exec` wrapper done in the
//! forked child: `setns(net)`, a private mount namespace (slave of the caller's), a fresh `/sys` for that network
//! namespace, then the caller's cgroup hierarchies mounted again (a fresh `/sys` hides them and `lxc-start` needs
//! them). LXC's command socket is abstract and so per network namespace: every `lxc-*` call for a node's
//! containers must go through here with that node's namespace.
// pvesim simulates PVE: its timestamps and lock timeouts are the simulated node's real time
#![allow(clippy::disallowed_methods)]

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::LxcError;

/// What a finished child printed and its exit code (`-1` when killed by a signal).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Output {
    pub stdout: String,
    pub stderr: String,
    pub code: i32,
}

impl Output {
    pub fn ok(&self) -> bool {
        self.code == 0
    }
}

/// One cgroup mount of the caller, prepared (C strings) before the fork.
struct CgMount {
    source: CString,
    target: CString,
    fstype: CString,
    flags: libc::c_ulong,
    data: CString,
}

/// Everything the forked child needs to enter a node's network namespace, prepared before the fork so the child
/// only makes system calls.
struct NetnsEntry {
    fd: OwnedFd,
    mounts: Vec<CgMount>,
}

fn cstr(s: &str) -> CString {
    CString::new(s.replace('\0', "")).unwrap_or_default()
}

/// Splits mount options from `/proc/self/mounts` into `MS_*` flags and the file-system specific data.
fn mount_flags(opts: &str) -> (libc::c_ulong, String) {
    let mut flags = 0;
    let mut data = Vec::new();
    for o in opts.split(',') {
        match o {
            "rw" => {}
            "ro" => flags |= libc::MS_RDONLY,
            "nosuid" => flags |= libc::MS_NOSUID,
            "nodev" => flags |= libc::MS_NODEV,
            "noexec" => flags |= libc::MS_NOEXEC,
            "relatime" => flags |= libc::MS_RELATIME,
            "noatime" => flags |= libc::MS_NOATIME,
            "nodiratime" => flags |= libc::MS_NODIRATIME,
            "strictatime" => flags |= libc::MS_STRICTATIME,
            "seclabel" => {}
            other => data.push(other),
        }
    }
    (flags, data.join(","))
}

/// The caller's mounts at or below `/sys/fs/cgroup`, in mount order.
fn cgroup_mounts() -> Result<Vec<CgMount>, LxcError> {
    let text = std::fs::read_to_string("/proc/self/mounts").map_err(|e| LxcError::Io {
        path: "/proc/self/mounts".into(),
        source: e,
    })?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            if f.len() < 4 || !(f[1] == "/sys/fs/cgroup" || f[1].starts_with("/sys/fs/cgroup/")) {
                return None;
            }
            let (flags, data) = mount_flags(f[3]);
            Some(CgMount {
                source: cstr(f[0]),
                target: cstr(&f[1].replace("\\040", " ")),
                fstype: cstr(f[2]),
                flags,
                data: cstr(&data),
            })
        })
        .collect())
}

fn prepare_netns(ns: &str) -> Result<NetnsEntry, LxcError> {
    let path = format!("/run/netns/{ns}");
    let f = File::open(&path).map_err(|e| LxcError::Netns {
        netns: ns.to_string(),
        msg: format!(
            "cannot open {path}: {e} (create it with `ip netns add {ns}` or scripts/testbed/netns)"
        ),
    })?;
    Ok(NetnsEntry {
        fd: f.into(),
        mounts: cgroup_mounts()?,
    })
}

fn last_err() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Runs in the forked child, before exec: only system calls on data prepared before the fork.
#[allow(unsafe_code)] // setns/unshare/mount have no safe wrapper in our dependencies
fn enter(e: &NetnsEntry) -> std::io::Result<()> {
    let slash = c"/";
    let sys = c"/sys";
    let sysfs = c"sysfs";
    // SAFETY: plain system calls on valid, NUL-terminated strings and an open file descriptor owned by `e`.
    unsafe {
        if libc::setns(e.fd.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
            return Err(last_err());
        }
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(last_err());
        }
        if libc::mount(
            std::ptr::null(),
            slash.as_ptr(),
            std::ptr::null(),
            libc::MS_SLAVE | libc::MS_REC,
            std::ptr::null(),
        ) != 0
        {
            return Err(last_err());
        }
        // A fresh sysfs shows this network namespace's devices (LXC looks the bridge up there).
        libc::umount2(sys.as_ptr(), libc::MNT_DETACH);
        if libc::mount(
            sysfs.as_ptr(),
            sys.as_ptr(),
            sysfs.as_ptr(),
            0,
            std::ptr::null(),
        ) != 0
        {
            return Err(last_err());
        }
        for m in &e.mounts {
            libc::mkdir(m.target.as_ptr(), 0o755);
            let data = if m.data.as_bytes().is_empty() {
                std::ptr::null()
            } else {
                m.data.as_ptr() as *const libc::c_void
            };
            if libc::mount(
                m.source.as_ptr(),
                m.target.as_ptr(),
                m.fstype.as_ptr(),
                m.flags,
                data,
            ) != 0
            {
                return Err(last_err());
            }
        }
    }
    Ok(())
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// An unlinked temporary file for a child's stdout or stderr.
fn capture_file() -> Result<File, LxcError> {
    let dir = std::env::temp_dir();
    let p = dir.join(format!(
        ".pvesim-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&p)
        .map_err(|e| LxcError::Io {
            path: p.clone(),
            source: e,
        })?;
    let _ = std::fs::remove_file(&p);
    Ok(f)
}

fn read_back(mut f: File) -> String {
    let mut s = String::new();
    let _ = f.seek(SeekFrom::Start(0));
    let mut b = Vec::new();
    let _ = f.read_to_end(&mut b);
    s.push_str(&String::from_utf8_lossy(&b));
    s
}

/// Runs `argv` (in network namespace `netns` when given) and waits at most `timeout`. A non-zero exit is an
/// `Output`, not an error; failing to start, a missing namespace and the timeout are errors.
pub fn run(argv: &[String], netns: Option<&str>, timeout: Duration) -> Result<Output, LxcError> {
    run_input(argv, netns, timeout, None)
}

/// [`run`] with `input` written to the child's stdin (through a pipe, by a thread; never logged).
#[allow(unsafe_code)]
// pre_exec: the closure only calls `enter`
// pvesim's lxc backend runs the LXC tools itself (it stands in for PVE's own tools)
#[allow(clippy::disallowed_methods)]
pub fn run_input(
    argv: &[String],
    netns: Option<&str>,
    timeout: Duration,
    input: Option<&[u8]>,
) -> Result<Output, LxcError> {
    let Some((prog, args)) = argv.split_first() else {
        return Err(LxcError::Spawn {
            argv: String::new(),
            msg: "empty argv".into(),
        });
    };
    let shown = argv.join(" ");
    let out = capture_file()?;
    let err = capture_file()?;
    let io = |e: std::io::Error| LxcError::Spawn {
        argv: shown.clone(),
        msg: e.to_string(),
    };
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(out.try_clone().map_err(io)?)
        .stderr(err.try_clone().map_err(io)?);
    if let Some(ns) = netns {
        let entry = prepare_netns(ns)?;
        // SAFETY: the closure only makes system calls on data prepared before the fork (no allocation, no locks).
        unsafe {
            cmd.pre_exec(move || enter(&entry));
        }
    }
    tracing::debug!(argv = %shown, netns = netns.unwrap_or("-"), "spawn");
    let mut child = cmd.spawn().map_err(io)?;
    if let (Some(data), Some(mut w)) = (input, child.stdin.take()) {
        let data = data.to_vec();
        std::thread::spawn(move || {
            use std::io::Write;
            let _ = w.write_all(&data);
        });
    }
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait().map_err(io)? {
            Some(s) => break s,
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(LxcError::Timeout {
                    argv: shown,
                    secs: timeout.as_secs(),
                    stderr: read_back(err).trim().to_string(),
                });
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    Ok(Output {
        stdout: read_back(out),
        stderr: read_back(err),
        code: status.code().unwrap_or(-1),
    })
}

/// Like [`run`], but a non-zero exit is [`LxcError::Failed`] with the argv and stderr.
pub fn check(argv: &[String], netns: Option<&str>, timeout: Duration) -> Result<Output, LxcError> {
    let o = run(argv, netns, timeout)?;
    if o.ok() {
        Ok(o)
    } else {
        Err(LxcError::Failed {
            argv: argv.join(" "),
            code: o.code,
            stderr: o.stderr.trim().to_string(),
        })
    }
}

/// Builds an argv from string-likes.
pub fn argv<S: AsRef<str>>(parts: &[S]) -> Vec<String> {
    parts.iter().map(|s| s.as_ref().to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_data_are_split() {
        let (f, d) = mount_flags("rw,nosuid,nodev,noexec,relatime,memory");
        assert_eq!(
            f,
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_RELATIME
        );
        assert_eq!(d, "memory");
        let (f, d) = mount_flags("ro,nosuid,nodev,noexec,mode=755");
        assert_eq!(f & libc::MS_RDONLY, libc::MS_RDONLY);
        assert_eq!(d, "mode=755");
    }

    #[test]
    fn output_exit_code_and_streams() {
        let o = run(
            &argv(&["sh", "-c", "echo out; echo err >&2; exit 3"]),
            None,
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(
            (o.stdout.as_str(), o.stderr.as_str(), o.code),
            ("out\n", "err\n", 3)
        );
        let e = check(&argv(&["false"]), None, Duration::from_secs(5)).unwrap_err();
        assert!(e.to_string().contains("false"), "{e}");
    }

    #[test]
    fn stdin_is_fed() {
        let o = run_input(
            &argv(&["cat"]),
            None,
            Duration::from_secs(5),
            Some(b"root:pw\n"),
        )
        .unwrap();
        assert_eq!(o.stdout, "root:pw\n");
    }

    #[test]
    fn timeout_kills_the_child() {
        let t = Instant::now();
        let e = run(&argv(&["sleep", "5"]), None, Duration::from_millis(200)).unwrap_err();
        assert!(matches!(e, LxcError::Timeout { .. }), "{e}");
        assert!(t.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn missing_netns_is_named() {
        let e = run(
            &argv(&["true"]),
            Some("pxsim-no-such-ns"),
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(e.to_string().contains("pxsim-no-such-ns"), "{e}");
    }
}
