//! Decoded values of the store's hot trees, kept next to the bytes they were decoded from.
//!
//! A reconcile pass reads every desired, applied and observed container and every operation; at 10,000
//! containers decoding that JSON took about 90 % of a pass (a second each). The cache keeps, per key, the value's
//! bytes and its decoded form; a read compares the bytes sled returns with the cached ones and decodes only what
//! changed. sled stays the only truth: nothing is invalidated by hand, so no write path can leave the cache
//! stale, and keys that disappeared are dropped at the next full scan.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;

use crate::store::StoreError;

type Entry<T> = (sled::IVec, Arc<T>);

/// A stored list whose elements are shared out one by one (a fleet's desired containers).
pub(crate) struct SharedList<T>(pub Vec<Arc<T>>);

impl<T> Clone for SharedList<T> {
    fn clone(&self) -> Self {
        SharedList(self.0.clone())
    }
}

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for SharedList<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Vec::<T>::deserialize(d)?;
        Ok(SharedList(v.into_iter().map(Arc::new).collect()))
    }
}

/// Shared by the clones of a store (they share the trees).
pub(crate) struct Decoded<T> {
    map: Arc<Mutex<HashMap<sled::IVec, Entry<T>>>>,
}

impl<T> Clone for Decoded<T> {
    fn clone(&self) -> Self {
        Decoded {
            map: self.map.clone(),
        }
    }
}

impl<T> Default for Decoded<T> {
    fn default() -> Self {
        Decoded {
            map: Arc::new(Mutex::new(HashMap::new())),
        }
    }
}

impl<T: DeserializeOwned + Clone> Decoded<T> {
    fn decoded(
        map: &mut HashMap<sled::IVec, Entry<T>>,
        name: &'static str,
        key: sled::IVec,
        bytes: sled::IVec,
    ) -> Result<Arc<T>, StoreError> {
        if let Some((b, v)) = map.get(&key) {
            if *b == bytes {
                return Ok(v.clone());
            }
        }
        let v: Arc<T> = Arc::new(crate::store::dec(name, &key, &bytes)?);
        map.insert(key, (bytes, v.clone()));
        Ok(v)
    }

    /// Every value under `pfx`, in key order.
    pub fn scan(
        &self,
        tree: &sled::Tree,
        name: &'static str,
        pfx: &[u8],
    ) -> Result<Vec<Arc<T>>, StoreError> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let mut seen = pfx.is_empty().then(HashSet::new);
        let mut out = Vec::new();
        for r in tree.scan_prefix(pfx) {
            let (k, v) = r?;
            if let Some(seen) = seen.as_mut() {
                seen.insert(k.clone());
            }
            out.push(Self::decoded(&mut map, name, k, v)?);
        }
        if let Some(seen) = seen {
            map.retain(|k, _| seen.contains(k));
        }
        Ok(out)
    }

    /// Like [`Decoded::scan`], cloned out of the cache.
    pub fn scan_owned(
        &self,
        tree: &sled::Tree,
        name: &'static str,
        pfx: &[u8],
    ) -> Result<Vec<T>, StoreError> {
        Ok(self
            .scan(tree, name, pfx)?
            .into_iter()
            .map(|v| (*v).clone())
            .collect())
    }

    /// Records that `key` now holds `bytes`, the encoding of `value`, as the writer that just stored them
    /// knows: the next read finds them decoded already. Still checked against the tree like any entry, so a
    /// concurrent write of the same key that landed last is decoded at its next read.
    pub fn remember(&self, key: &[u8], bytes: sled::IVec, value: Arc<T>) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(sled::IVec::from(key), (bytes, value));
    }

    pub fn get(
        &self,
        tree: &sled::Tree,
        name: &'static str,
        key: &[u8],
    ) -> Result<Option<T>, StoreError> {
        let Some(bytes) = tree.get(key)? else {
            return Ok(None);
        };
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        Ok(Some(
            (*Self::decoded(&mut map, name, sled::IVec::from(key), bytes)?).clone(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever path wrote the tree, a read returns what is stored now: changed values are decoded again,
    /// removed keys are gone (from the answer and, after a full scan, from the cache).
    #[test]
    fn reads_follow_the_tree_whoever_wrote_it() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = db.open_tree("t").unwrap();
        let cache: Decoded<Vec<u32>> = Decoded::default();
        tree.insert("a", serde_json::to_vec(&vec![1u32]).unwrap())
            .unwrap();
        tree.insert("b", serde_json::to_vec(&vec![2u32]).unwrap())
            .unwrap();
        assert_eq!(
            cache.scan_owned(&tree, "t", b"").unwrap(),
            vec![vec![1], vec![2]]
        );
        let before = cache.scan(&tree, "t", b"").unwrap();
        tree.insert("a", serde_json::to_vec(&vec![1u32, 1]).unwrap())
            .unwrap();
        let after = cache.scan(&tree, "t", b"").unwrap();
        assert_eq!(*after[0], vec![1, 1], "a changed value is decoded again");
        assert!(
            Arc::ptr_eq(&before[1], &after[1]),
            "an unchanged one is not"
        );
        assert_eq!(cache.get(&tree, "t", b"a").unwrap(), Some(vec![1, 1]));
        tree.remove("b").unwrap();
        assert_eq!(cache.scan_owned(&tree, "t", b"").unwrap(), vec![vec![1, 1]]);
        assert_eq!(
            cache.map.lock().unwrap().len(),
            1,
            "the removed key left the cache"
        );
        assert_eq!(cache.get(&tree, "t", b"b").unwrap(), None);
        tree.insert("c", b"not json".to_vec()).unwrap();
        assert!(matches!(
            cache.scan(&tree, "t", b""),
            Err(StoreError::Corrupt { tree: "t", .. })
        ));
    }

    /// A writer that tells the cache what it stored saves the next read a decode; a later write by anyone else
    /// (or a remembered value the tree does not hold) is still decoded from the tree.
    #[test]
    fn remembered_writes_are_read_without_decoding_and_the_tree_still_wins() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = db.open_tree("t").unwrap();
        let cache: Decoded<Vec<u32>> = Decoded::default();
        let bytes = sled::IVec::from(serde_json::to_vec(&vec![7u32]).unwrap());
        tree.insert("a", bytes.clone()).unwrap();
        let mine = Arc::new(vec![7u32]);
        cache.remember(b"a", bytes, mine.clone());
        let read = cache.scan(&tree, "t", b"").unwrap();
        assert!(Arc::ptr_eq(&read[0], &mine), "read without decoding");
        tree.insert("a", serde_json::to_vec(&vec![8u32]).unwrap())
            .unwrap();
        assert_eq!(cache.scan_owned(&tree, "t", b"").unwrap(), vec![vec![8]]);
        // remembered bytes that lost a race with another write of the key: the tree's value is read
        cache.remember(
            b"a",
            sled::IVec::from(serde_json::to_vec(&vec![9u32]).unwrap()),
            Arc::new(vec![9]),
        );
        assert_eq!(cache.get(&tree, "t", b"a").unwrap(), Some(vec![8]));
    }
}
