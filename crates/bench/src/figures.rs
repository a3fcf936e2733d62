//! The benchmark's figures, computed from the controller's operation records: dispatch rates, operation
//! latency beyond the simulated PVE time, and the critical path the latency model allows.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::sim::LatencyModel;

/// What the figures need of one controller operation record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpRecord {
    pub node: String,
    /// `create`, `start`, `destroy`, `seed_template`, ... (the controller's kind names).
    pub kind: String,
    pub succeeded: bool,
    pub dispatched_ms: Option<i64>,
    pub finished_ms: Option<i64>,
}

/// The PVE time the latency model charges for one operation of `kind`: a create op also starts the
/// container (the agent runs `pct create` then `pct start`), a destroy is `pct destroy` (the stop before it is
/// immediate in the simulation), everything else (seeding a template already present, updates) is free.
pub fn simulated(kind: &str, m: &LatencyModel) -> Duration {
    match kind {
        "create" => m.create + m.start,
        "start" => m.start,
        "destroy" => m.destroy,
        _ => Duration::ZERO,
    }
}

/// Dispatch throughput at the controller.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DispatchFigures {
    /// Operations dispatched (seeding included).
    pub dispatched: usize,
    /// From the first dispatch to the last, in seconds.
    pub span_secs: f64,
    /// `dispatched / span` (0 when everything went out within one millisecond).
    pub mean_per_sec: f64,
    /// The most dispatches in any one-second window.
    pub peak_1s: usize,
    /// From the submit to the last dispatch, in seconds.
    pub since_submit_secs: f64,
    /// `dispatched / since_submit`: the rate a user sees (the controller stamps a whole pass's dispatches
    /// with one time, so `mean_per_sec` alone can be 0 or huge).
    pub per_sec_since_submit: f64,
}

/// Dispatch rates from the records' `dispatched_ms`; `since_ms` (the submit) starts the clock of
/// `per_sec_since_submit`.
pub fn dispatch_figures(ops: &[OpRecord], since_ms: i64) -> DispatchFigures {
    let mut t: Vec<i64> = ops.iter().filter_map(|o| o.dispatched_ms).collect();
    t.sort_unstable();
    let (Some(first), Some(last)) = (t.first(), t.last()) else {
        return DispatchFigures::default();
    };
    let span_ms = last - first;
    let mut peak = 0;
    let mut lo = 0;
    for hi in 0..t.len() {
        while t[hi] - t[lo] >= 1000 {
            lo += 1;
        }
        peak = peak.max(hi - lo + 1);
    }
    let since_ms = (last - since_ms).max(1);
    DispatchFigures {
        since_submit_secs: since_ms as f64 / 1000.0,
        per_sec_since_submit: t.len() as f64 * 1000.0 / since_ms as f64,
        dispatched: t.len(),
        span_secs: span_ms as f64 / 1000.0,
        mean_per_sec: if span_ms > 0 {
            t.len() as f64 * 1000.0 / span_ms as f64
        } else {
            0.0
        },
        peak_1s: peak,
    }
}

/// Orchestration latency of operations: (finished - dispatched) minus the simulated PVE time, in ms.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LatencyFigures {
    pub count: usize,
    pub p50_ms: i64,
    pub p99_ms: i64,
    pub max_ms: i64,
}

/// Over every succeeded operation that was dispatched and finished.
pub fn latency_figures(ops: &[OpRecord], model: &LatencyModel) -> LatencyFigures {
    let mut v: Vec<i64> = ops
        .iter()
        .filter(|o| o.succeeded)
        .filter_map(|o| {
            let took = o.finished_ms? - o.dispatched_ms?;
            Some(took - simulated(&o.kind, model).as_millis() as i64)
        })
        .collect();
    if v.is_empty() {
        return LatencyFigures::default();
    }
    v.sort_unstable();
    LatencyFigures {
        count: v.len(),
        p50_ms: percentile(&v, 50.0),
        p99_ms: percentile(&v, 99.0),
        max_ms: *v.last().expect("not empty"),
    }
}

/// Orchestration delay of each operation beyond an ideal node: per node, the operations in dispatch order (ties
/// in finish order) go to `parallelism` slots, each starting when it was dispatched or a slot frees (whichever is later) and
/// taking exactly its simulated time; the delay is the actual finish minus that ideal finish. Unlike
/// [`latency_figures`], time an operation waits at its agent behind the node's other operations (which the
/// latency model itself imposes) is not counted.
pub fn queue_adjusted_latency(
    ops: &[OpRecord],
    model: &LatencyModel,
    parallelism: usize,
) -> LatencyFigures {
    let parallelism = parallelism.max(1);
    let mut per_node: BTreeMap<&str, Vec<&OpRecord>> = BTreeMap::new();
    for o in ops.iter().filter(|o| o.succeeded) {
        if o.dispatched_ms.is_some() && o.finished_ms.is_some() {
            per_node.entry(o.node.as_str()).or_default().push(o);
        }
    }
    let mut v = Vec::new();
    for list in per_node.values_mut() {
        // Operations dispatched together (one reconcile pass stamps them with one time) are matched with
        // the slots in the order they finished: the agent's own order, not an arbitrary one.
        list.sort_by_key(|o| (o.dispatched_ms, o.finished_ms));
        let mut slots = vec![i64::MIN; parallelism];
        for o in list.iter() {
            let (d, f) = (o.dispatched_ms.unwrap_or(0), o.finished_ms.unwrap_or(0));
            let slot = slots.iter_mut().min().expect("parallelism is at least 1");
            let start = d.max(*slot);
            let ideal = start + simulated(&o.kind, model).as_millis() as i64;
            *slot = ideal;
            v.push(f - ideal);
        }
    }
    if v.is_empty() {
        return LatencyFigures::default();
    }
    v.sort_unstable();
    LatencyFigures {
        count: v.len(),
        p50_ms: percentile(&v, 50.0),
        p99_ms: percentile(&v, 99.0),
        max_ms: *v.last().expect("not empty"),
    }
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The shortest wall time the latency model allows: on each node, its operations of each kind in rounds of
/// `parallelism` (ceil(ops / parallelism) rounds of that kind's time), seeding first; the slowest node
/// decides.
pub fn critical_path(ops: &[OpRecord], model: &LatencyModel, parallelism: usize) -> Duration {
    let parallelism = parallelism.max(1);
    let mut per_node: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    for o in ops {
        *per_node
            .entry(o.node.as_str())
            .or_default()
            .entry(o.kind.as_str())
            .or_default() += 1;
    }
    per_node
        .values()
        .map(|kinds| {
            kinds
                .iter()
                .map(|(kind, n)| simulated(kind, model) * n.div_ceil(parallelism) as u32)
                .sum::<Duration>()
        })
        .max()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(node: &str, kind: &str, d: i64, f: i64) -> OpRecord {
        OpRecord {
            node: node.into(),
            kind: kind.into(),
            succeeded: true,
            dispatched_ms: Some(d),
            finished_ms: Some(f),
        }
    }

    const M: LatencyModel = LatencyModel::PVE;

    #[test]
    fn critical_path_counts_rounds_per_node() {
        // node a: 5 creates at parallelism 4 -> 2 rounds of 3 s; node b: 4 creates -> 1 round
        let mut ops: Vec<OpRecord> = (0..5).map(|_| op("a", "create", 0, 0)).collect();
        ops.extend((0..4).map(|_| op("b", "create", 0, 0)));
        ops.push(op("a", "seed_template", 0, 0));
        assert_eq!(critical_path(&ops, &M, 4), Duration::from_secs(6));
        assert_eq!(critical_path(&ops, &M, 1), Duration::from_secs(15));
        assert_eq!(critical_path(&[], &M, 4), Duration::ZERO);
    }

    #[test]
    fn latency_subtracts_the_simulated_time() {
        let ops = vec![
            op("a", "create", 1000, 4100),        // 3100 - 3000 = 100
            op("a", "destroy", 1000, 2300),       // 1300 - 1000 = 300
            op("a", "seed_template", 1000, 1010), // 10
        ];
        let l = latency_figures(&ops, &M);
        assert_eq!(l.count, 3);
        assert_eq!(l.p50_ms, 100);
        assert_eq!(l.p99_ms, 300);
        assert_eq!(l.max_ms, 300);
    }

    #[test]
    fn queue_adjusted_latency_does_not_count_waiting_behind_the_node() {
        // 5 creates dispatched at 0 on one node at parallelism 4: the fifth ideally starts at 3000 and
        // finishes at 6000; each finishes 50 ms after its ideal time
        // (the late one listed first: operations dispatched together are matched in finish order)
        let mut ops = vec![op("a", "create", 0, 6050)];
        ops.extend((0..4).map(|_| op("a", "create", 0, 3050)));
        let q = queue_adjusted_latency(&ops, &M, 4);
        assert_eq!((q.count, q.p50_ms, q.max_ms), (5, 50, 50));
        // the raw figure counts the fifth's wait
        assert_eq!(latency_figures(&ops, &M).max_ms, 3050);
    }

    #[test]
    fn dispatch_peak_window() {
        let ops: Vec<OpRecord> = [0, 100, 200, 999, 1500, 3000]
            .iter()
            .map(|t| op("a", "create", *t, *t))
            .collect();
        let d = dispatch_figures(&ops, -1000);
        assert_eq!(d.dispatched, 6);
        assert!((d.per_sec_since_submit - 1.5).abs() < 1e-9);
        assert_eq!(d.peak_1s, 4);
        assert!((d.mean_per_sec - 2.0).abs() < 1e-9);
    }

    #[test]
    fn percentiles_nearest_rank() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&[7], 99.0), 7);
    }
}
