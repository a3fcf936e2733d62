//! Waiting for a condition ([`wait_until`]: poll, then panic with what was seen instead) and describing
//! containers for those messages.

use std::future::Future;
use std::time::Duration;

use pxfleet_proto::v1 as pb;

/// One line per container, for wait messages.
pub fn describe(cs: &[pb::ContainerInfo]) -> String {
    cs.iter()
        .map(|c| {
            format!(
                "{} state={:?} node={} vm_id={} addrs={:?} drifted={} err={}",
                c.name,
                pb::ContainerState::try_from(c.state).unwrap_or_default(),
                c.node,
                c.vm_id,
                c.addresses,
                c.drifted,
                c.last_error
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Polls `check` every 200 ms until it returns `Ok`, panicking after `timeout` with `what` and the last
/// `Err` (a description of what was seen instead).
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) => {
                if tokio::time::Instant::now() >= deadline {
                    panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}");
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
