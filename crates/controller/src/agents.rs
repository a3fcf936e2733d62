//! The per-node session registry: at most one live Connect stream per node, with its outbound queue of
//! [`ToAgent`] messages (turned into protobuf by the Connect handler). The reconcile loop dispatches through
//! [`Sessions::send_on`]; a node without a session simply keeps its operations pending until it comes back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tokio::sync::mpsc;

use crate::model::Operation;

/// What the controller sends an agent on its Connect stream.
pub enum ToAgent {
    /// The first message of a stream: the agent is registered as `node`.
    Welcome { node: String },
    /// Heartbeat `heartbeat_seq` (0: none) and the final results of `op_ids` were received.
    Ack {
        heartbeat_seq: u64,
        op_ids: Vec<String>,
    },
    /// An operation to run; `password` is the container's root password (a create only).
    Operation {
        op: Box<Operation>,
        password: Option<String>,
    },
}

/// Never shows the password.
impl std::fmt::Debug for ToAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToAgent::Welcome { node } => f.debug_struct("Welcome").field("node", node).finish(),
            ToAgent::Ack {
                heartbeat_seq,
                op_ids,
            } => f
                .debug_struct("Ack")
                .field("heartbeat_seq", heartbeat_seq)
                .field("op_ids", op_ids)
                .finish(),
            ToAgent::Operation { op, password } => f
                .debug_struct("Operation")
                .field("op", op)
                .field("password", &password.as_ref().map(|_| "<redacted>"))
                .finish(),
        }
    }
}

/// Outbound queue depth per node; dispatch beyond it waits for the next pass.
const QUEUE: usize = 256;

struct Session {
    conn: u64,
    tx: mpsc::Sender<ToAgent>,
    /// The serial of the certificate the agent connected with (hex; empty when unknown).
    serial: String,
}

pub struct Sessions {
    next_conn: AtomicU64,
    by_node: Mutex<HashMap<String, Session>>,
}

impl Default for Sessions {
    /// Connection numbers start at the clock (microseconds), so a number recorded on an operation before a
    /// restart never names a stream of the restarted controller.
    fn default() -> Self {
        // the real clock, not the injected one: numbers must grow across restarts whatever a test's clock says
        #[allow(clippy::disallowed_methods)]
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(1);
        Sessions {
            next_conn: AtomicU64::new(start),
            by_node: Mutex::new(HashMap::new()),
        }
    }
}

impl Sessions {
    /// Registers a new stream for `node`, replacing (and thereby closing) an older one. Returns the connection
    /// number (to unregister exactly this one later) and the receiving end for the response stream.
    pub fn register(&self, node: &str) -> (u64, mpsc::Receiver<ToAgent>) {
        self.register_with_serial(node, "")
    }

    /// [`Sessions::register`] for an agent that connected with the certificate of serial `serial` (hex), which
    /// [`Sessions::close_serial`] cuts off.
    pub fn register_with_serial(&self, node: &str, serial: &str) -> (u64, mpsc::Receiver<ToAgent>) {
        let conn = self.next_conn.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = mpsc::channel(QUEUE);
        let old = self.by_node.lock().expect("sessions lock").insert(
            node.to_string(),
            Session {
                conn,
                tx,
                serial: serial.to_string(),
            },
        );
        if old.is_some() {
            tracing::info!(node, "agent reconnected; previous stream replaced");
        }
        (conn, rx)
    }

    /// Removes the session if it is still connection `conn`. Returns whether it was.
    pub fn unregister(&self, node: &str, conn: u64) -> bool {
        let mut map = self.by_node.lock().expect("sessions lock");
        if map.get(node).is_some_and(|s| s.conn == conn) {
            map.remove(node);
            true
        } else {
            false
        }
    }

    pub fn is_connected(&self, node: &str) -> bool {
        self.by_node
            .lock()
            .expect("sessions lock")
            .get(node)
            .is_some_and(|s| !s.tx.is_closed())
    }

    pub fn connected(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .by_node
            .lock()
            .expect("sessions lock")
            .keys()
            .cloned()
            .collect();
        v.sort();
        v
    }

    /// Drops every session (at shutdown): each Connect response stream ends, so its agent closes the connection
    /// and the server's graceful shutdown does not wait for streams that never end.
    pub fn close_all(&self) {
        self.by_node.lock().expect("sessions lock").clear();
    }

    /// Drops the sessions of agents connected with the certificate `serial` (revoked): their Connect streams
    /// end, and their reconnection is refused at the handshake. Returns the nodes cut off.
    pub fn close_serial(&self, serial: &str) -> Vec<String> {
        let mut map = self.by_node.lock().expect("sessions lock");
        let nodes: Vec<String> = map
            .iter()
            .filter(|(_, s)| !serial.is_empty() && s.serial == serial)
            .map(|(n, _)| n.clone())
            .collect();
        for n in &nodes {
            map.remove(n);
        }
        nodes
    }

    /// The connection number of the node's live session.
    pub fn current_conn(&self, node: &str) -> Option<u64> {
        self.by_node
            .lock()
            .expect("sessions lock")
            .get(node)
            .filter(|s| !s.tx.is_closed())
            .map(|s| s.conn)
    }

    /// Queues a message for a node without waiting; false when the node has no session or its queue is full.
    pub fn send(&self, node: &str, msg: ToAgent) -> bool {
        self.send_on(node, msg).is_some()
    }

    /// Like [`Sessions::send`], returning the connection number the message was queued on.
    pub fn send_on(&self, node: &str, msg: ToAgent) -> Option<u64> {
        let (conn, tx) = match self.by_node.lock().expect("sessions lock").get(node) {
            Some(s) => (s.conn, s.tx.clone()),
            None => return None,
        };
        tx.try_send(msg).ok().map(|()| conn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_session_wins_and_old_unregister_is_ignored() {
        let s = Sessions::default();
        let (c1, _rx1) = s.register("n1");
        let (c2, mut rx2) = s.register("n1");
        assert!(!s.unregister("n1", c1));
        assert!(s.is_connected("n1"));
        assert!(s.send(
            "n1",
            ToAgent::Ack {
                heartbeat_seq: 0,
                op_ids: vec![]
            }
        ));
        assert!(rx2.try_recv().is_ok());
        assert!(s.unregister("n1", c2));
        assert!(!s.is_connected("n1"));
        assert!(!s.send(
            "n1",
            ToAgent::Ack {
                heartbeat_seq: 0,
                op_ids: vec![]
            }
        ));
    }
}
