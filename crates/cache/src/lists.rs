//! Doubly linked lists of page keys in one slab, with an index by key: the
//! per-shard state of [`Lru`](crate::Lru) and [`TwoQ`](crate::TwoQ). Every
//! operation (insert, remove, move to the back of a list, look up which
//! list holds a key) is O(1), and a key is in at most one list, so these
//! policies keep no stale or duplicate entries.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::{Observed, PageKey, PageOracle, PageProbe, PageState};

const NIL: u32 = u32::MAX;

/// A cheap hasher for page keys (multiply-xor; keys are not adversarial).
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

#[derive(Clone, Copy)]
struct Node {
    key: PageKey,
    prev: u32,
    next: u32,
    list: u8,
}

/// `N` lists over one slab of nodes.
pub(crate) struct Lists<const N: usize> {
    nodes: Vec<Node>,
    free: Vec<u32>,
    head: [u32; N],
    tail: [u32; N],
    len: [usize; N],
    index: HashMap<PageKey, u32, BuildHasherDefault<KeyHasher>>,
    /// Dirty candidates put aside by [`take`](Lists::take); kept to reuse
    /// its allocation.
    scratch: Vec<PageKey>,
}

/// What [`Lists::take`] does with a victim.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Then {
    /// Forget the key.
    Forget,
    /// Move the key to the back of this list (a ghost list: the page is
    /// gone but its key is remembered).
    MoveTo(u8),
}

impl<const N: usize> Lists<N> {
    pub fn new() -> Self {
        Lists {
            nodes: Vec::new(),
            free: Vec::new(),
            head: [NIL; N],
            tail: [NIL; N],
            len: [0; N],
            index: HashMap::default(),
            scratch: Vec::new(),
        }
    }

    /// Room for `n` keys in all (nodes, free slots and the index), so
    /// that tracking that many allocates nothing.
    pub fn reserve(&mut self, n: usize) {
        self.nodes.reserve(n.saturating_sub(self.nodes.len()));
        self.free.reserve(n.saturating_sub(self.free.len()));
        self.index.reserve(n.saturating_sub(self.index.len()));
        self.scratch.reserve(64);
    }

    /// The list holding `key`.
    pub fn list_of(&self, key: PageKey) -> Option<u8> {
        self.index.get(&key).map(|&i| self.nodes[i as usize].list)
    }

    pub fn len(&self, list: u8) -> usize {
        self.len[list as usize]
    }

    /// Appends `key` to the back of `list`, or moves it there from
    /// wherever it is.
    pub fn push_back(&mut self, list: u8, key: PageKey) {
        if let Some(&i) = self.index.get(&key) {
            self.unlink(i);
            self.link_back(i, list);
            return;
        }
        let node = Node {
            key,
            prev: NIL,
            next: NIL,
            list,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                u32::try_from(self.nodes.len() - 1).expect("over 4 billion pages in one shard")
            }
        };
        self.index.insert(key, i);
        self.link_back(i, list);
    }

    /// Forgets `key`; returns the list it was in.
    pub fn remove(&mut self, key: PageKey) -> Option<u8> {
        let i = self.index.remove(&key)?;
        let list = self.nodes[i as usize].list;
        self.unlink(i);
        self.free.push(i);
        Some(list)
    }

    /// Forgets the keys at the front of `list` until it holds `keep`.
    pub fn trim(&mut self, list: u8, keep: usize) {
        while self.len[list as usize] > keep {
            let key = self.nodes[self.head[list as usize] as usize].key;
            self.remove(key);
        }
    }

    /// Forgets every key of `region`.
    pub fn forget_region(&mut self, region: u64) {
        let keys: Vec<PageKey> = self
            .index
            .keys()
            .filter(|k| k.region == region)
            .copied()
            .collect();
        for k in keys {
            self.remove(k);
        }
    }

    /// Forgets the keys of `list` whose page is not resident, or pinned.
    pub fn purge(&mut self, list: u8, oracle: &dyn PageOracle) {
        let mut i = self.head[list as usize];
        while i != NIL {
            let Node { key, next, .. } = self.nodes[i as usize];
            if matches!(judge(oracle.probe(key, false)), Judged::Gone) {
                self.remove(key);
            }
            i = next;
        }
    }

    /// Takes up to `want` victims from the front (the cold end) of `list`
    /// into `out`, doing `then` with each, and returns how many it took.
    ///
    /// Clean pages are preferred: among the first `2 * want + 16` entries
    /// examined, dirty pages are put aside and taken (oldest first) only if
    /// clean ones do not make up the batch, since a dirty victim costs a
    /// store write before it can be dropped. Busy pages are skipped; pages
    /// not resident any more, gone or pinned are forgotten.
    pub fn take(
        &mut self,
        list: u8,
        want: usize,
        then: Then,
        oracle: &dyn PageOracle,
        out: &mut Vec<PageKey>,
    ) -> usize {
        let window = want * 2 + 16;
        let mut dirty = std::mem::take(&mut self.scratch);
        dirty.clear();
        let mut got = 0;
        let mut examined = 0;
        let mut budget = self.len[list as usize];
        let mut i = self.head[list as usize];
        while i != NIL && budget > 0 && got < want {
            budget -= 1;
            let Node { key, next, .. } = self.nodes[i as usize];
            i = next;
            examined += 1;
            match judge(oracle.probe(key, false)) {
                Judged::Gone => {
                    self.remove(key);
                }
                Judged::Busy => {}
                Judged::Resident(PageState::Dirty) if examined <= window => dirty.push(key),
                Judged::Resident(_) => {
                    self.victim(key, then);
                    out.push(key);
                    got += 1;
                }
            }
            if examined >= window && got + dirty.len() >= want {
                break;
            }
        }
        for &key in dirty.iter().take(want - got) {
            self.victim(key, then);
            out.push(key);
            got += 1;
        }
        self.scratch = dirty;
        got
    }

    fn victim(&mut self, key: PageKey, then: Then) {
        match then {
            Then::Forget => {
                self.remove(key);
            }
            Then::MoveTo(list) => self.push_back(list, key),
        }
    }

    fn unlink(&mut self, i: u32) {
        let Node {
            prev, next, list, ..
        } = self.nodes[i as usize];
        let l = list as usize;
        if prev == NIL {
            self.head[l] = next;
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next == NIL {
            self.tail[l] = prev;
        } else {
            self.nodes[next as usize].prev = prev;
        }
        self.len[l] -= 1;
    }

    fn link_back(&mut self, i: u32, list: u8) {
        let l = list as usize;
        let tail = self.tail[l];
        {
            let n = &mut self.nodes[i as usize];
            n.list = list;
            n.prev = tail;
            n.next = NIL;
        }
        if tail == NIL {
            self.head[l] = i;
        } else {
            self.nodes[tail as usize].next = i;
        }
        self.tail[l] = i;
        self.len[l] += 1;
    }

    /// The keys of `list`, front to back (for tests).
    #[cfg(test)]
    pub fn keys(&self, list: u8) -> Vec<PageKey> {
        let mut v = Vec::new();
        let mut i = self.head[list as usize];
        while i != NIL {
            v.push(self.nodes[i as usize].key);
            i = self.nodes[i as usize].next;
        }
        v
    }
}

enum Judged {
    /// Not resident, region gone, or pinned: forget it.
    Gone,
    /// Held by another thread: leave it where it is.
    Busy,
    /// A candidate.
    Resident(PageState),
}

fn judge(probe: Option<PageProbe>) -> Judged {
    match probe {
        None => Judged::Gone,
        Some(p) if p.pinned => Judged::Gone,
        Some(p) => match p.state {
            Observed::Stable(PageState::Empty) | Observed::Busy(PageState::Empty) => Judged::Gone,
            Observed::Busy(_) => Judged::Busy,
            Observed::Stable(s) => Judged::Resident(s),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> PageKey {
        PageKey {
            region: 1,
            index: i,
        }
    }

    #[test]
    fn push_move_remove_keep_lists_consistent() {
        let mut l = Lists::<2>::new();
        for i in 0..5 {
            l.push_back(0, key(i));
        }
        l.push_back(0, key(1)); // to the back
        l.push_back(1, key(3)); // to the other list
        assert_eq!(l.keys(0), [0, 2, 4, 1].map(key));
        assert_eq!(l.keys(1), [key(3)]);
        assert_eq!(l.remove(key(2)), Some(0));
        assert_eq!(l.remove(key(2)), None);
        l.push_back(1, key(9)); // reuses the freed node
        assert_eq!(l.nodes.len(), 5);
        l.trim(0, 1);
        assert_eq!(l.keys(0), [key(1)]);
        assert_eq!((l.len(0), l.len(1)), (1, 2));
        assert_eq!(l.list_of(key(9)), Some(1));
        l.forget_region(1);
        assert_eq!((l.len(0), l.len(1)), (0, 0));
        assert!(l.index.is_empty());
    }
}
