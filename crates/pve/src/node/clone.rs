//! `pct clone` and `pct template`: a container made as a copy of another (a full copy of its disks, or a linked
//! clone of a template's), and a container turned into a template. The typed request [`CloneSpec`], its argv
//! ([`clone_args`]) and the [`Node`] calls. A clone keeps the source's configuration; the caller then sets what
//! it wants different with [`Node::set`] (and grows the root disk with [`Node::resize`]).

use super::*;

/// A clone of container `source` as `vmid`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloneSpec {
    pub source: u32,
    pub vmid: u32,
    pub hostname: Option<String>,
    /// `--full 1`: copy the disks. `false`: a linked clone, which PVE makes only from a template and only on a
    /// storage that can (lvmthin, zfspool, ...): the new root disk stays on the source's storage.
    pub full: bool,
    /// `--storage`: where a full clone's disks go; `None`: the source's. Not allowed for a linked clone.
    pub storage: Option<String>,
    pub description: Option<String>,
}

/// Arguments after `pct` for `pct clone` (a task command: its exit code reports a failed task).
pub fn clone_args(s: &CloneSpec) -> Result<Vec<String>, PveError> {
    argv::check_vmid(s.source)?;
    argv::check_vmid(s.vmid)?;
    let v = Some(s.vmid);
    if s.source == s.vmid {
        return Err(PveError::invalid(
            v,
            "newid",
            s.vmid,
            "an id other than the source's",
        ));
    }
    let mut a = vec![
        "clone".to_string(),
        s.source.to_string(),
        s.vmid.to_string(),
    ];
    if let Some(h) = &s.hostname {
        if !argv::is_dns_name(h) {
            return Err(PveError::invalid(v, "hostname", h, "a DNS name"));
        }
        a.extend(["--hostname".into(), h.clone()]);
    }
    if let Some(d) = &s.description {
        a.extend(["--description".into(), d.clone()]);
    }
    a.extend(["--full".into(), if s.full { "1" } else { "0" }.into()]);
    match (&s.storage, s.full) {
        (Some(st), true) => a.extend(["--storage".into(), st.clone()]),
        (Some(st), false) => {
            return Err(PveError::invalid(
                v,
                "storage",
                st,
                "no storage for a linked clone (its disk stays on the template's storage)",
            ))
        }
        (None, _) => {}
    }
    Ok(a)
}

impl Node {
    /// `pct clone SOURCE VMID ...`. Errors worth matching: [`PveError::AlreadyExists`] (the new id is taken) and
    /// [`PveError::NotFound`] (no source on this node).
    pub async fn clone_ct(&self, spec: &CloneSpec) -> Result<(), PveError> {
        let cmd = self.pct(clone_args(spec)?, self.timeouts.create);
        tracing::info!(node = %self.name, source = spec.source, vmid = spec.vmid, full = spec.full, "cloning container");
        self.exec(cmd, Some(spec.vmid)).await?;
        Ok(())
    }

    /// `pct template VMID`: the (stopped) container becomes a template, which can be cloned but not started.
    pub async fn template(&self, vmid: u32) -> Result<(), PveError> {
        argv::check_vmid(vmid)?;
        let cmd = self.pct(vec!["template".into(), vmid.to_string()], self.timeouts.set);
        self.exec(cmd, Some(vmid)).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> CloneSpec {
        CloneSpec {
            source: 9000,
            vmid: 120,
            hostname: Some("web".into()),
            full: true,
            storage: Some("local-zfs".into()),
            description: None,
        }
    }

    #[test]
    fn clone_argv() {
        assert_eq!(
            clone_args(&spec()).unwrap(),
            [
                "clone",
                "9000",
                "120",
                "--hostname",
                "web",
                "--full",
                "1",
                "--storage",
                "local-zfs"
            ]
        );
        let linked = CloneSpec {
            full: false,
            storage: None,
            ..spec()
        };
        assert_eq!(
            clone_args(&linked).unwrap(),
            ["clone", "9000", "120", "--hostname", "web", "--full", "0"]
        );
        let bad = CloneSpec {
            full: false,
            ..spec()
        };
        assert!(clone_args(&bad)
            .unwrap_err()
            .to_string()
            .contains("linked clone"));
        let same = CloneSpec {
            vmid: 9000,
            ..spec()
        };
        assert!(clone_args(&same).is_err());
    }
}
