//! `resize`: growing a container's disk.

use super::*;

impl<D: NodeApi> Executor<D> {
    /// `resize`: grows `rootfs` or `mpN` to an absolute size (never shrinks).
    pub(super) async fn resize(
        &self,
        vmid: u32,
        expect: Option<&ManagedMark>,
        disk: &str,
        size_gib: u64,
    ) -> Outcome {
        let d = &*self.inner.node;
        let cfg = self.existing(vmid).await?;
        check_managed(vmid, &cfg, expect)?;
        let current = cfg
            .raw
            .get(disk)
            .ok_or_else(|| fail(format!("CT {vmid} has no disk `{disk}`")))?;
        let current_bytes = cfg.disk_size(disk).ok_or_else(|| {
            fail(format!(
                "CT {vmid}: cannot read the size of {disk} from `{current}`"
            ))
        })?;
        let want = size_gib.saturating_mul(1 << 30);
        if current_bytes == want {
            return ok("already at that size", self.observed(vmid).await);
        }
        if current_bytes > want {
            return Err(fail(format!(
                "CT {vmid}: {disk} is {current_bytes} bytes, larger than the requested {size_gib} GiB; shrinking is not supported"
            )));
        }
        d.resize(vmid, disk, size_gib).await?;
        ok("resized", self.observed(vmid).await)
    }
}
