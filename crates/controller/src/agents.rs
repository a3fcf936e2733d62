//! The per-node session registry: at most one live Connect stream per node, with its outbound queue. The
//! reconciler dispatches through [`Sessions::send`]; a node without a session simply keeps its operations
//! pending until it comes back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use pxfleet_proto::v1 as pb;
use tokio::sync::mpsc;

/// What the Connect response stream yields.
pub type Outbound = Result<pb::ControllerMessage, tonic::Status>;

/// Outbound queue depth per node; dispatch beyond it waits for the next pass.
const QUEUE: usize = 256;

struct Session {
    conn: u64,
    tx: mpsc::Sender<Outbound>,
}

pub struct Sessions {
    next_conn: AtomicU64,
    by_node: Mutex<HashMap<String, Session>>,
}

impl Default for Sessions {
    /// Connection numbers start at the clock (microseconds), so a number recorded on an operation before a
    /// restart never names a stream of the restarted controller.
    fn default() -> Self {
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
    pub fn register(&self, node: &str) -> (u64, mpsc::Receiver<Outbound>) {
        let conn = self.next_conn.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = mpsc::channel(QUEUE);
        let old = self
            .by_node
            .lock()
            .expect("sessions lock")
            .insert(node.to_string(), Session { conn, tx });
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
    pub fn send(&self, node: &str, msg: pb::controller_message::Msg) -> bool {
        self.send_on(node, msg).is_some()
    }

    /// Like [`Sessions::send`], returning the connection number the message was queued on.
    pub fn send_on(&self, node: &str, msg: pb::controller_message::Msg) -> Option<u64> {
        let (conn, tx) = match self.by_node.lock().expect("sessions lock").get(node) {
            Some(s) => (s.conn, s.tx.clone()),
            None => return None,
        };
        tx.try_send(Ok(pb::ControllerMessage { msg: Some(msg) }))
            .ok()
            .map(|()| conn)
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
        assert!(s.send("n1", pb::controller_message::Msg::Ack(pb::Ack::default())));
        assert!(rx2.try_recv().is_ok());
        assert!(s.unregister("n1", c2));
        assert!(!s.is_connected("n1"));
        assert!(!s.send("n1", pb::controller_message::Msg::Ack(pb::Ack::default())));
    }
}
