//! `destroy`.

use super::*;

impl<D: NodeApi> Executor<D> {
    /// `destroy`: stops and destroys a managed container (or a half-made leftover); gone already is success.
    pub(super) async fn destroy(
        &self,
        op_id: &str,
        vmid: u32,
        expect: Option<&ManagedMark>,
        purge: bool,
    ) -> Outcome {
        let d = &*self.inner.node;
        let Some(cfg) = d.config(vmid).await? else {
            return ok("already gone", None);
        };
        if is_half_made(&cfg) {
            self.cleanup(vmid).await?;
            return ok("destroyed (was half-made)", None);
        }
        check_managed(vmid, &cfg, expect)?;
        if self.status(vmid).await? == "running" {
            self.progress(op_id, "stopping before destroy");
            d.stop(vmid).await?;
        }
        d.destroy(vmid, purge).await?;
        if d.config(vmid).await?.is_some() {
            return Err(OpFailure {
                error: format!("CT {vmid} still exists after destroy"),
                retryable: true,
            });
        }
        ok("destroyed", None)
    }
}
