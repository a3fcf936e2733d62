//! Controller operations (protobuf) into the agent's [`Operation`]s, every field checked.

use super::*;

use super::options::{create_spec, mark_of};
use crate::node::CreateSpec;

/// `STORAGE:vztmpl/FILE` into its parts.
pub fn parse_template_volid(volid: &str) -> Option<(String, String)> {
    let (storage, rest) = volid.split_once(':')?;
    let file = rest.strip_prefix("vztmpl/")?;
    if storage.is_empty() || file.is_empty() || file.contains('/') {
        return None;
    }
    Some((storage.to_string(), file.to_string()))
}

/// A spec's PVE settings, typed.
fn typed_options(op_id: &str, spec: &v1::ContainerSpec) -> Result<CreateSpec, ConvertError> {
    create_spec(spec).map_err(|message| ConvertError {
        op_id: op_id.to_string(),
        field: "spec",
        message,
    })
}

/// Converts a controller operation into the agent's own.
pub fn operation_from_proto(op: v1::Operation) -> Result<Operation, ConvertError> {
    use v1::operation::Kind;
    let op_id = op.op_id.clone();
    let err = |field: &'static str, message: String| ConvertError {
        op_id: op_id.clone(),
        field,
        message,
    };
    if op.op_id.is_empty() {
        return Err(err("op_id", "empty; every operation needs an id".into()));
    }
    let vmid = op.vm_id;
    let need_vmid = || {
        if vmid < 100 {
            Err(err(
                "vm_id",
                format!("{vmid} is not a container id (100..)"),
            ))
        } else {
            Ok(vmid)
        }
    };
    let kind = match op.kind {
        None => return Err(err("kind", "missing; expected create, update, ...".into())),
        Some(Kind::Create(c)) => {
            let spec = c.spec.ok_or_else(|| err("create.spec", "missing".into()))?;
            let mark = mark_of(&spec)
                .ok_or_else(|| err("create.spec.fleet", "fleet and name are required".into()))?;
            let vmid = if spec.vm_id != 0 {
                spec.vm_id
            } else {
                need_vmid()?
            };
            let clone = match &spec.clone_source {
                Some(src) if src.vm_id < 100 || src.vm_id == vmid => {
                    return Err(err(
                        "create.spec.clone_source.vm_id",
                        format!(
                            "{} is not a container to clone into {vmid} (100.., not the new id)",
                            src.vm_id
                        ),
                    ))
                }
                Some(src) => Some(CloneFrom {
                    source: src.vm_id,
                    full: src.full,
                }),
                None => None,
            };
            // A clone has no template file.
            let (storage, file_name) = if clone.is_some() && spec.template_volid.is_empty() {
                (String::new(), String::new())
            } else {
                parse_template_volid(&spec.template_volid).ok_or_else(|| {
                    err(
                        "create.spec.template_volid",
                        format!(
                            "`{}` is not a template volume id; expected STORAGE:vztmpl/FILE",
                            spec.template_volid
                        ),
                    )
                })?
            };
            OpKind::Create(CreateOp {
                vmid,
                mark,
                template: TemplateSpec {
                    storage,
                    file_name,
                    source: TemplateSource::Existing,
                },
                options: typed_options(&op_id, &spec)?,
                tags: spec.tags.clone(),
                description: Some(spec.description.clone()).filter(|d| !d.is_empty()),
                ssh_public_keys: spec.ssh_public_keys.clone(),
                password: spec
                    .password
                    .as_ref()
                    .filter(|p| !p.value.is_empty())
                    .map(|p| Secret(p.value.clone())),
                start: c.start && !spec.template_flag,
                make_template: spec.template_flag,
                wait_for: crate::ops::WaitFor {
                    ipv4: c.wait_ipv4,
                    ipv6: c.wait_ipv6,
                },
                clone,
            })
        }
        Some(Kind::Update(u)) => {
            let spec = u.spec.ok_or_else(|| err("update.spec", "missing".into()))?;
            OpKind::Update {
                vmid: if spec.vm_id != 0 {
                    spec.vm_id
                } else {
                    need_vmid()?
                },
                expect: mark_of(&spec),
                desired: typed_options(&op_id, &spec)?,
                tags: spec.tags.clone(),
                description: Some(spec.description.clone()).filter(|d| !d.is_empty()),
                restart: u.restart_allowed,
                adopt: u.adopt,
                make_template: spec.template_flag,
            }
        }
        Some(Kind::Resize(r)) => {
            if r.disk != "rootfs"
                && !r
                    .disk
                    .strip_prefix("mp")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            {
                return Err(err(
                    "resize.disk",
                    format!("`{}`; expected rootfs or mpN", r.disk),
                ));
            }
            OpKind::Resize {
                vmid: need_vmid()?,
                expect: None,
                disk: r.disk,
                size_gib: r.size_gib,
            }
        }
        Some(Kind::Start(_)) => OpKind::Start {
            vmid: need_vmid()?,
            expect: None,
        },
        Some(Kind::Stop(s)) => OpKind::Stop {
            vmid: need_vmid()?,
            expect: None,
            force: s.force,
            timeout_secs: if s.timeout_seconds == 0 {
                60
            } else {
                s.timeout_seconds
            },
        },
        Some(Kind::Destroy(d)) => OpKind::Destroy {
            vmid: need_vmid()?,
            expect: if d.fleet.is_empty() {
                None
            } else {
                Some(ManagedMark {
                    fleet: d.fleet,
                    name: d.name,
                })
            },
            purge: d.purge,
        },
        Some(Kind::Migrate(m)) => {
            if m.target_node.is_empty() {
                return Err(err("migrate.target_node", "empty".into()));
            }
            OpKind::Migrate {
                vmid: need_vmid()?,
                expect: None,
                target: m.target_node,
                restart: m.restart,
            }
        }
        Some(Kind::Snapshot(s)) => {
            let action = match s.action.as_str() {
                "create" => crate::ops::SnapshotAction::Create,
                "delete" => crate::ops::SnapshotAction::Delete,
                "rollback" => crate::ops::SnapshotAction::Rollback,
                "list" => crate::ops::SnapshotAction::List,
                other => {
                    return Err(err(
                        "snapshot.action",
                        format!("`{other}`; expected create, delete, rollback or list"),
                    ))
                }
            };
            if action != crate::ops::SnapshotAction::List {
                let vmid = need_vmid()?;
                pxfleet_pve::check_snapshot_name(vmid, &s.name)
                    .map_err(|e| err("snapshot.name", e.to_string()))?;
            }
            OpKind::Snapshot {
                vmid: need_vmid()?,
                expect: None,
                action,
                name: s.name,
                description: Some(s.description).filter(|d| !d.is_empty()),
                start: s.start,
            }
        }
        Some(Kind::SeedTemplate(s)) => {
            let digest = match s.checksum {
                Some(v1::seed_template::Checksum::Sha256(h)) => {
                    Some(Digest::Sha256(h.to_ascii_lowercase()))
                }
                Some(v1::seed_template::Checksum::Sha512(h)) => {
                    Some(Digest::Sha512(h.to_ascii_lowercase()))
                }
                None if s.existing => {
                    return Ok(Operation {
                        id: op.op_id,
                        kind: OpKind::SeedTemplate(TemplateSpec {
                            storage: s.storage,
                            file_name: s.file_name,
                            source: TemplateSource::Volume,
                        }),
                    });
                }
                None if s.url.is_empty() => {
                    // An appliance name from the PVE index: pveam verifies it.
                    return Ok(Operation {
                        id: op.op_id,
                        kind: OpKind::SeedTemplate(TemplateSpec {
                            storage: s.storage,
                            file_name: s.file_name,
                            source: TemplateSource::Appliance,
                        }),
                    });
                }
                // A `template_url` without checksum: downloaded unverified, its sha256 reported.
                None => None,
            };
            if let Some(digest) = &digest {
                let expect_len = match digest {
                    Digest::Sha256(_) => 64,
                    Digest::Sha512(_) => 128,
                };
                if digest.hex().len() != expect_len
                    || !digest.hex().bytes().all(|b| b.is_ascii_hexdigit())
                {
                    return Err(err(
                        "seed_template.checksum",
                        format!(
                            "`{}` is not a {} hex digest",
                            digest.hex(),
                            digest.algorithm()
                        ),
                    ));
                }
            }
            OpKind::SeedTemplate(TemplateSpec {
                storage: s.storage,
                file_name: s.file_name,
                source: TemplateSource::Url { url: s.url, digest },
            })
        }
    };
    Ok(Operation { id: op.op_id, kind })
}
