//! `pxctl node token create|list|cordon|uncordon`: enrolment tokens and scheduling switches (admin).

use pxfleet_proto::v1 as pb;
use serde::Serialize;

use crate::args::{ListFormat, NodeCommand, TokenCommand, TokenCreateArgs};
use crate::client::Client;
use crate::error::Result;
use crate::render::{self, timestamp, NodeRecord};
use crate::term::Io;

pub async fn run(client: &mut Client, cmd: &NodeCommand, io: &mut Io<'_>) -> Result<u8> {
    match cmd {
        NodeCommand::Token(TokenCommand::Create(a)) => token_create(client, a, io).await,
        NodeCommand::List { format } => super::get::nodes(client, *format, io).await,
        NodeCommand::Cordon { node, reason } => {
            let n = client
                .api
                .cordon_node(pb::CordonNodeRequest {
                    node: node.clone(),
                    reason: reason.clone(),
                })
                .await?
                .into_inner();
            writeln!(
                io.err,
                "node {node} cordoned: no new containers are placed on it"
            )?;
            io.out
                .write_all(render::nodes(ListFormat::Table, &[NodeRecord::from(&n)]).as_bytes())?;
            Ok(0)
        }
        NodeCommand::Drain {
            node,
            reason,
            no_wait,
            timeout,
        } => super::drain::run(client, node, reason, *no_wait, *timeout, io).await,
        NodeCommand::Uncordon { node } => {
            let n = client
                .api
                .uncordon_node(pb::UncordonNodeRequest { node: node.clone() })
                .await?
                .into_inner();
            writeln!(io.err, "node {node} uncordoned")?;
            io.out
                .write_all(render::nodes(ListFormat::Table, &[NodeRecord::from(&n)]).as_bytes())?;
            Ok(0)
        }
    }
}

/// The JSON/YAML form of a new token.
#[derive(Debug, Serialize)]
struct TokenRecord {
    token: String,
    token_id: String,
    expires: Option<String>,
    ca_fingerprint: String,
    node: Option<String>,
}

async fn token_create(client: &mut Client, a: &TokenCreateArgs, io: &mut Io<'_>) -> Result<u8> {
    let ttl = u32::try_from(a.ttl.as_secs()).unwrap_or(u32::MAX);
    let t = client
        .api
        .create_join_token(pb::CreateJoinTokenRequest {
            ttl_seconds: ttl,
            node: a.node.clone().unwrap_or_default(),
        })
        .await?
        .into_inner();
    let rec = TokenRecord {
        token: t.token.clone(),
        token_id: t.token_id.clone(),
        expires: timestamp(t.expires_unix_ms),
        ca_fingerprint: t.ca_fingerprint.clone(),
        node: a.node.clone(),
    };
    match a.format {
        ListFormat::Json => io.out.write_all(render::json(&rec).as_bytes())?,
        ListFormat::Yaml => io.out.write_all(
            render::yaml::to_yaml(&serde_json::to_value(&rec).unwrap_or_default()).as_bytes(),
        )?,
        ListFormat::Table => {
            writeln!(io.out, "{}", t.token)?;
            writeln!(
                io.err,
                "Join token {} (shown once; valid until {}{}; it pins the controller's CA, sha256 {}). On the node run:\n  pxagent join --controller {} --token {} --node {}",
                t.token_id,
                rec.expires.as_deref().unwrap_or("?"),
                a.node.as_deref().map(|n| format!(", only for node {n}")).unwrap_or_default(),
                t.ca_fingerprint,
                client.url,
                t.token,
                a.node.as_deref().unwrap_or("\"$(hostname)\"")
            )?;
        }
    }
    Ok(0)
}
