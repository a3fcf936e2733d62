//! `start` and `stop`.

use super::*;

impl<D: NodeApi> Executor<D> {
    /// `start`: starts the container (if stopped) and waits, bounded, for its addresses.
    pub(super) async fn start(
        &self,
        op_id: &str,
        vmid: u32,
        expect: Option<&ManagedMark>,
    ) -> Outcome {
        let d = &*self.inner.node;
        let cfg = self.existing(vmid).await?;
        check_managed(vmid, &cfg, expect)?;
        if self.status(vmid).await? != "running" {
            d.start(vmid).await?;
        }
        let interfaces = self
            .wait_for_addresses(op_id, vmid, !cfg.nets.is_empty())
            .await;
        ok("running", self.observed_with(vmid, interfaces).await)
    }

    /// `stop`: a clean shutdown (unless forced), a hard stop when that does not finish in time.
    pub(super) async fn stop(
        &self,
        vmid: u32,
        expect: Option<&ManagedMark>,
        force: bool,
        timeout_secs: u32,
    ) -> Outcome {
        let d = &*self.inner.node;
        let cfg = self.existing(vmid).await?;
        check_managed(vmid, &cfg, expect)?;
        if self.status(vmid).await? == "running" {
            let clean = !force && d.shutdown(vmid, timeout_secs.max(1)).await?;
            if !clean {
                d.stop(vmid).await?;
            }
            ok("stopped", self.observed(vmid).await)
        } else {
            ok("already stopped", self.observed(vmid).await)
        }
    }
}
