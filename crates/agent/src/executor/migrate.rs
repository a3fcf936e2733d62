//! `migrate`.

use super::*;

impl<D: NodeApi> Executor<D> {
    /// `migrate`: moves a managed container to another node of the cluster; already gone from here is success.
    pub(super) async fn migrate(
        &self,
        vmid: u32,
        expect: Option<&ManagedMark>,
        target: &str,
        restart: bool,
    ) -> Outcome {
        let d = &*self.inner.node;
        let Some(cfg) = d.config(vmid).await? else {
            return ok(
                format!("not on this node; assumed migrated to {target}"),
                None,
            );
        };
        check_managed(vmid, &cfg, expect)?;
        d.migrate(vmid, target, restart).await?;
        ok(format!("migrated to {target}"), None)
    }
}
