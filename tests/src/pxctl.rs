//! `pxctl` run as a user would, with a [`Cluster`]'s admin config: exit code and output, or parsed JSON.

use std::process::Stdio;

use tokio::process::Command;

use crate::binaries::workspace_root;
use crate::cluster::Cluster;
use crate::process::COMMAND_TIMEOUT;

impl Cluster {
    /// `pxctl ARGS` with this cluster's admin config; returns (exit code, stdout, stderr).
    pub async fn pxctl(&self, args: &[&str]) -> (i32, String, String) {
        let mut cmd = Command::new(&self.bins.pxctl);
        cmd.args(args)
            .env("PXCTL_CONFIG", &self.pxctl_config)
            .env("NO_COLOR", "1")
            .current_dir(workspace_root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let out = tokio::time::timeout(COMMAND_TIMEOUT, cmd.output())
            .await
            .unwrap_or_else(|_| panic!("pxctl {args:?} did not finish within {COMMAND_TIMEOUT:?}"))
            .unwrap_or_else(|e| panic!("starting pxctl {args:?}: {e}"));
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `pxctl ARGS -o json`, which must succeed; the parsed output.
    pub async fn pxctl_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["-o", "json"]);
        let (code, out, err) = self.pxctl(&all).await;
        assert_eq!(
            code, 0,
            "pxctl {all:?} exited {code}\nstdout: {out}\nstderr: {err}"
        );
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("pxctl {all:?}: not JSON ({e}): {out}"))
    }

    /// The actions of `pxctl audit --fleet FLEET`, oldest first.
    pub async fn audit_actions(&self, fleet: &str) -> Vec<String> {
        let audit = self.pxctl_json(&["audit", "--fleet", fleet]).await;
        audit
            .as_array()
            .unwrap_or_else(|| panic!("pxctl audit: not a list: {audit}"))
            .iter()
            .filter_map(|e| e["action"].as_str().map(str::to_string))
            .collect()
    }
}
