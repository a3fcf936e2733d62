//! A Terraform state (`terraform state pull`, format version 4): the bpg container resources' instances, with
//! what taking them over needs: vm_id, node, MAC addresses.

use std::path::Path;

use serde_json::Value;

use super::ImportError;

/// One `proxmox_virtual_environment_container` instance of the state.
#[derive(Debug, Clone, PartialEq)]
pub struct StateCt {
    /// `module.dev_lxcs.proxmox_virtual_environment_container.lxc["dev-nextcloud"]`
    pub address: String,
    /// The `for_each` key (`dev-nextcloud`), if any.
    pub key: Option<String>,
    pub vm_id: Option<u64>,
    pub node: Option<String>,
    pub hostname: Option<String>,
    /// MAC of each `network_interface`, in order.
    pub macs: Vec<Option<String>>,
}

pub fn read(path: &Path) -> Result<Vec<StateCt>, ImportError> {
    let text = std::fs::read_to_string(path).map_err(|source| ImportError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text).map_err(|message| ImportError::State {
        path: path.to_path_buf(),
        message,
    })
}

pub fn parse(text: &str) -> Result<Vec<StateCt>, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| {
        format!(
            "line {} column {}: not JSON: {e} (expected the output of `terraform state pull`)",
            e.line(),
            e.column()
        )
    })?;
    let version = doc.get("version").and_then(Value::as_u64);
    if version != Some(4) {
        return Err(format!(
            "\"version\": {}: only Terraform state format version 4 is read",
            version
                .map(|v| v.to_string())
                .unwrap_or_else(|| "missing".into())
        ));
    }
    let mut out = Vec::new();
    let resources = doc
        .get("resources")
        .and_then(Value::as_array)
        .ok_or("\"resources\": missing or not a list")?;
    for r in resources {
        if r.get("type").and_then(Value::as_str) != Some(super::bpg::CONTAINER)
            || r.get("mode").and_then(Value::as_str) != Some("managed")
        {
            continue;
        }
        let mut base = String::new();
        if let Some(m) = r.get("module").and_then(Value::as_str) {
            base.push_str(m);
            base.push('.');
        }
        base.push_str(super::bpg::CONTAINER);
        base.push('.');
        base.push_str(r.get("name").and_then(Value::as_str).unwrap_or("?"));
        for inst in r
            .get("instances")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = match inst.get("index_key") {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Number(n)) => Some(n.to_string()),
                _ => None,
            };
            let address = match &key {
                Some(k) => format!("{base}[{k:?}]"),
                None => base.clone(),
            };
            let at = inst.get("attributes").cloned().unwrap_or(Value::Null);
            let vm_id = at.get("vm_id").and_then(|v| {
                v.as_u64()
                    .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            });
            let node = at
                .get("node_name")
                .and_then(Value::as_str)
                .map(str::to_string);
            let hostname = at
                .get("initialization")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
                .and_then(|i| i.get("hostname"))
                .and_then(Value::as_str)
                .map(str::to_string);
            let macs = at
                .get("network_interface")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|n| {
                    n.get("mac_address")
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                })
                .collect();
            out.push(StateCt {
                address,
                key,
                vm_id,
                node,
                hostname,
                macs,
            });
        }
    }
    Ok(out)
}
