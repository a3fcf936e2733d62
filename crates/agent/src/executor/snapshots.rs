//! `snapshot`: a container's snapshot taken, deleted or rolled back to (`pct snapshot`, `delsnapshot`, `rollback`),
//! or only listed; the result carries the list after it. A re-run after an agent restart finds a snapshot it took
//! (or deleted) already and does not fail on it.

use super::*;
use crate::ops::SnapshotAction;

impl<D: NodeApi> Executor<D> {
    pub(super) async fn snapshot_op(&self, op: &Operation) -> Outcome {
        let OpKind::Snapshot {
            vmid,
            expect,
            action,
            name,
            description,
            start,
        } = &op.kind
        else {
            unreachable!("perform dispatches snapshot operations here");
        };
        let (op_id, vmid, action, start) = (op.id.as_str(), *vmid, *action, *start);
        let (expect, description, name) = (expect.as_ref(), description.as_deref(), name.as_str());
        let d = &*self.inner.node;
        let cfg = self.existing(vmid).await?;
        check_managed(vmid, &cfg, expect)?;
        let before = d.snapshots(vmid).await?;
        let there = before.iter().any(|s| s.name == name);
        let message = match action {
            SnapshotAction::Create if there => format!("snapshot {name} already taken"),
            SnapshotAction::Create => {
                self.progress(op_id, format!("pct snapshot {vmid} {name}"));
                d.snapshot(vmid, name, description).await?;
                format!("snapshot {name} taken")
            }
            SnapshotAction::Delete if !there => format!("snapshot {name} already deleted"),
            SnapshotAction::Delete => {
                self.progress(op_id, format!("pct delsnapshot {vmid} {name}"));
                d.delete_snapshot(vmid, name).await?;
                format!("snapshot {name} deleted")
            }
            SnapshotAction::Rollback => {
                self.progress(op_id, format!("pct rollback {vmid} {name}"));
                d.rollback(vmid, name, start).await?;
                format!("rolled back to {name}")
            }
            SnapshotAction::List => format!("{} snapshot(s)", before.len()),
        };
        let snapshots = if matches!(action, SnapshotAction::List) {
            before
        } else {
            d.snapshots(vmid).await?
        };
        Ok(OpResult {
            message,
            container: self.observed(vmid).await.map(Box::new),
            template_volid: None,
            template_sha256: None,
            snapshots: Some(snapshots),
        })
    }
}
