//! The simulated PVE nodes of a [`Cluster`] and their agents: adding a node (pvesim state, join token,
//! `pxagent join`, `pxagent run`), restarting, redirecting and killing agents, and reading a node's pvesim state.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pxfleet_proto::v1 as pb;

use crate::cluster::{Cluster, NodeSetup, SimNode};
use crate::error::{grpc, io, HarnessError, Result};
use crate::process::{run_command, spawn_logged, terminate};

impl Cluster {
    /// Adds a simulated node: pvesim state, a join token, `pxagent join`, then `pxagent run`.
    pub async fn add_node(&mut self, name: &str) -> Result<()> {
        self.add_node_with(name, &NodeSetup::default()).await
    }

    /// [`Cluster::add_node`] with a PVE cluster of its own choosing and extra pvesim overrides.
    pub async fn add_node_with(&mut self, name: &str, setup: &NodeSetup) -> Result<()> {
        let root = self.dir.path().to_path_buf();
        let base = root.join("nodes").join(name);
        let node = SimNode {
            name: name.to_string(),
            sim: base.join("sim"),
            bin: base.join("bin"),
            agent_dir: base.join("agent"),
            log: root.join(format!("agent-{name}.log")),
            agent: None,
        };
        let overrides = base.join("pvesim.toml");
        std::fs::create_dir_all(&base).map_err(io(&base))?;
        std::fs::write(
            &overrides,
            format!(
                "{}[latency]\ncreate_ms = {}\n",
                setup.overrides, self.options.create_latency_ms
            ),
        )
        .map_err(io(&overrides))?;
        // Every node shares the cluster directory `cluster` (PVE cluster `pvesim`) unless told otherwise.
        let cluster_dir = match &setup.cluster {
            Some(c) => root.join(format!("cluster-{c}")),
            None => root.join("cluster"),
        };
        let mut init = vec![
            "init".to_string(),
            "--state".into(),
            node.sim.display().to_string(),
            "--node".into(),
            name.into(),
            "--cluster".into(),
            cluster_dir.display().to_string(),
            "--config".into(),
            overrides.display().to_string(),
            "--bin-dir".into(),
            node.bin.display().to_string(),
        ];
        if let Some(c) = &setup.cluster {
            init.extend(["--cluster-name".to_string(), c.clone()]);
        }
        run_command(&self.bins.pvesim, &init, &[]).await?;
        for t in &self.options.preseed_templates {
            let out = pvesim_tool(&node.sim, "pvesm", &["path", &format!("local:vztmpl/{t}")]);
            if out.code != 0 {
                return Err(HarnessError::Setup {
                    what: format!("pvesm path for {t} on {name}"),
                    message: out.stderr,
                });
            }
            let path = PathBuf::from(out.stdout.trim());
            std::fs::write(&path, "placeholder template: pvesim never unpacks it\n")
                .map_err(io(&path))?;
        }
        let token = self.join_token(name, 600).await?;
        self.join(name, &node.agent_dir, &token.token).await?;
        self.nodes.push(node);
        self.configure_agent(name)?;
        self.start_agent(name)?;
        Ok(())
    }

    /// A join token from the controller (admin), limited to `node`, valid `ttl_secs`.
    pub async fn join_token(
        &self,
        node: &str,
        ttl_secs: u32,
    ) -> Result<pb::CreateJoinTokenResponse> {
        let mut api = self.api().await?;
        Ok(api
            .create_join_token(pb::CreateJoinTokenRequest {
                ttl_seconds: ttl_secs,
                node: node.into(),
            })
            .await
            .map_err(grpc("CreateJoinToken"))?
            .into_inner())
    }

    /// `pxagent join` for `node` into `config_dir`, the token passed in the environment.
    pub async fn join(&self, node: &str, config_dir: &Path, token: &str) -> Result<String> {
        std::fs::create_dir_all(config_dir).map_err(io(config_dir))?;
        run_command(
            &self.bins.pxagent,
            &[
                "join".into(),
                "--controller".into(),
                self.url.clone(),
                "--node".into(),
                node.into(),
                "--config-dir".into(),
                config_dir.display().to_string(),
            ],
            &[("PXAGENT_JOIN_TOKEN", token)],
        )
        .await
    }

    /// Points the agent at its pvesim node; fast heartbeats and observations.
    fn configure_agent(&self, name: &str) -> Result<()> {
        let n = self.node(name);
        let command_timeout = self.options.command_timeout_secs;
        let conf_root = self.dir.path().join("cluster");
        edit_toml(&n.agent_toml(), |doc| {
            doc.insert("pve_bin_dir".into(), n.bin.display().to_string().into());
            // pvesim's cluster directory stands for /etc/pve.
            let conf_dir = conf_root.join("nodes").join(name).join("lxc");
            doc.insert(
                "pve_config_dir".into(),
                conf_dir.display().to_string().into(),
            );
            doc.insert("heartbeat_secs".into(), toml::Value::Integer(1));
            doc.insert("observe_secs".into(), toml::Value::Integer(1));
            doc.insert("address_wait_secs".into(), toml::Value::Integer(5));
            if let Some(t) = command_timeout {
                doc.insert(
                    "command_timeout_secs".into(),
                    toml::Value::Integer(t as i64),
                );
            }
            let mut env = toml::Table::new();
            env.insert("PVESIM_STATE".into(), n.sim.display().to_string().into());
            doc.insert("env".into(), toml::Value::Table(env));
        })
    }

    /// Starts `pxagent run` for `name` (again, after [`Cluster::kill_agent`]).
    pub fn start_agent(&mut self, name: &str) -> Result<()> {
        let bin = self.bins.pxagent.clone();
        let n = self.node_mut(name);
        let child = spawn_logged(
            &bin,
            &[
                "run".into(),
                "--config".into(),
                n.agent_toml().display().to_string(),
            ],
            &n.log,
        )?;
        n.agent = Some(child);
        Ok(())
    }

    /// Points the agent of `name` at `controller` (`https://HOST:PORT`, e.g. a [`netcut::Blackhole`] in front
    /// of the controller) and restarts it.
    pub async fn redirect_agent(&mut self, name: &str, controller: &str) -> Result<()> {
        edit_toml(&self.node(name).agent_toml(), |doc| {
            doc.insert("controller".into(), controller.into());
        })?;
        if let Some(mut c) = self.node_mut(name).agent.take() {
            terminate(&mut c, Duration::from_secs(10)).await;
        }
        self.start_agent(name)
    }

    /// SIGKILL to the agent of `name` (the node's containers stay as they are).
    pub async fn kill_agent(&mut self, name: &str) {
        if let Some(mut c) = self.node_mut(name).agent.take() {
            let _ = c.kill().await;
        }
    }

    pub(crate) fn node_mut(&mut self, name: &str) -> &mut SimNode {
        self.nodes
            .iter_mut()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("no node {name} in this cluster"))
    }

    /// Runs a pvesim tool (`pct`, `pvesh`, `pvesm`, `pveam`) against `node`'s state, in this process.
    pub fn pve(&self, node: &str, tool: &str, args: &[&str]) -> pxfleet_pvesim::Outcome {
        pvesim_tool(&self.node(node).sim, tool, args)
    }

    /// vm_ids of every container on `node` (managed or not), from `pct list`.
    pub fn vmids_on(&self, node: &str) -> Vec<u32> {
        let out = self.pve(node, "pct", &["list"]);
        assert_eq!(out.code, 0, "pct list on {node}: {}", out.stderr);
        out.stdout
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
            .collect()
    }

    /// pvesim's runtime record of `vmid` on `node` (`running`, `started`, `pid`), or None if it has none.
    pub fn runtime(&self, node: &str, vmid: u32) -> Option<serde_json::Value> {
        let path = self
            .node(node)
            .sim
            .join("runtime")
            .join(format!("{vmid}.json"));
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// `pct config VMID` on `node` as key -> value.
    pub fn pct_config(&self, node: &str, vmid: u32) -> BTreeMap<String, String> {
        let out = self.pve(node, "pct", &["config", &vmid.to_string()]);
        assert_eq!(out.code, 0, "pct config {vmid} on {node}: {}", out.stderr);
        out.stdout
            .lines()
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

fn pvesim_tool(state: &Path, tool: &str, args: &[&str]) -> pxfleet_pvesim::Outcome {
    let env: BTreeMap<String, String> =
        [("PVESIM_STATE".to_string(), state.display().to_string())].into();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    pxfleet_pvesim::run(tool, &args, &env)
}

/// Reads the TOML file at `path`, changes it with `change` and writes it back.
fn edit_toml(path: &Path, change: impl FnOnce(&mut toml::Table)) -> Result<()> {
    let setup = |message: String| HarnessError::Setup {
        what: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    let mut doc: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| setup(e.to_string()))?;
    change(&mut doc);
    let out = toml::to_string_pretty(&doc).map_err(|e| setup(e.to_string()))?;
    std::fs::write(path, out).map_err(io(path))
}
