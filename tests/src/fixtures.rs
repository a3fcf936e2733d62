//! Fleet files for the scenarios: [`fleet_yaml`] (templates, DHCP, storage, a test SSH key) and writing one
//! into a cluster's directory.

use std::path::PathBuf;

use crate::cluster::Cluster;

impl Cluster {
    /// Writes `yaml` into the cluster's directory as `name` and returns its path.
    pub fn write_fleet(&self, name: &str, yaml: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, yaml).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path
    }
}

/// An SSH key for test fleets (the public half of nothing in particular).
pub const TEST_SSH_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII/tPVpCESUKZXQ0ZlJvcxfIUAgEGPXvlUgtWiKvukcx ci@example";

/// A fleet file for the scenarios: fleet `name`, templates `deb13` and `ubu24` (pvesim's offline appliance
/// index), DHCP on vmbr0, storage local-lvm; `containers` is the YAML body under `containers:` (indented 2).
pub fn fleet_yaml(name: &str, containers: &str) -> String {
    format!(
        "fleet: {name}\n\
         defaults:\n  \
           template: deb13\n  \
           datastore_id: local-lvm\n  \
           bridge: vmbr0\n  \
           ip_address: dhcp\n  \
           ssh_public_keys: [\"{TEST_SSH_KEY}\"]\n\
         templates:\n  \
           deb13: {{pveam: debian-13-standard_13.6-1_amd64.tar.zst}}\n  \
           ubu24: {{pveam: ubuntu-24.04-standard_24.04-2_amd64.tar.zst}}\n\
         containers:\n{containers}"
    )
}
