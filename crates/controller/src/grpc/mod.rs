//! The gRPC edge: the two services and every conversion between protobuf and the controller's types. Handlers
//! authorise the caller, convert the request, call a use case and convert its answer back; nothing below this
//! folder sees protobuf (issue 25 moves what still does here).
//!
//! - [`fleet_service`]: FleetService, the API pxctl speaks.
//! - [`agent_service`]: AgentService, enrolment and the agents' Connect stream.
//! - [`convert`]: desired specs, operations and observations between protobuf and the model.
//! - [`convert_streams`]: Watch events and the Connect stream's messages.

pub mod agent_service;
pub mod convert;
pub mod convert_streams;
pub mod fleet_service;
