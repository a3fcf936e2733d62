//! Conversions at the edge, proto <-> the agent's own and pve's types: protobuf (`pxfleet.v1`) operations into the
//! agent's [`Operation`]s ([`operation`]), a `ContainerSpec` into pve's typed `CreateSpec` ([`options`]), and
//! back: a container's typed PVE config into an observed `ContainerSpec` ([`readback`]), results and inventory
//! into protobuf messages ([`report`]).

mod operation;
mod options;
mod readback;
mod report;

use std::collections::BTreeMap;

use pxfleet_proto::v1;

use crate::node::{ContainerConfig, ManagedMark, NodeFacts, Secret};
use crate::observe::ObservedContainer;
use crate::ops::{
    CloneFrom, CreateOp, Digest, OpKind, OpUpdate, Operation, TemplateSource, TemplateSpec,
};

pub use operation::{operation_from_proto, parse_template_volid};
pub use options::{create_spec, net_config};
pub use readback::config_to_spec;
pub use report::{inventory, observed_to_proto, storages, templates, update_to_proto};

/// An operation the agent cannot understand.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("operation {op_id}: field `{field}`: {message}")]
pub struct ConvertError {
    pub op_id: String,
    pub field: &'static str,
    pub message: String,
}

#[cfg(test)]
mod tests;
