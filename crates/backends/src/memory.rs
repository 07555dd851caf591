use std::sync::RwLock;

use crate::{Store, StoreError, StoreOp};

/// A store kept in memory: for tests, and for scratch regions whose
/// contents need not outlive the process.
#[derive(Debug, Default)]
pub struct MemoryStore {
    bytes: RwLock<Vec<u8>>,
    read_only: bool,
}

impl MemoryStore {
    /// A writable store holding `bytes`.
    pub fn new(bytes: Vec<u8>) -> Self {
        MemoryStore {
            bytes: RwLock::new(bytes),
            read_only: false,
        }
    }

    /// A read-only store holding `bytes`.
    pub fn read_only(bytes: Vec<u8>) -> Self {
        MemoryStore {
            bytes: RwLock::new(bytes),
            read_only: true,
        }
    }

    /// A copy of the current contents.
    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Store for MemoryStore {
    fn len(&self) -> Result<u64, StoreError> {
        Ok(self.bytes.read().unwrap_or_else(|e| e.into_inner()).len() as u64)
    }

    fn set_len(&self, len: u64) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::new(StoreOp::Len, len, libc::EBADF));
        }
        let len =
            usize::try_from(len).map_err(|_| StoreError::new(StoreOp::Len, len, libc::EFBIG))?;
        self.bytes
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .resize(len, 0);
        Ok(())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
        let bytes = self.bytes.read().unwrap_or_else(|e| e.into_inner());
        let Ok(start) = usize::try_from(offset) else {
            return Ok(0);
        };
        if start >= bytes.len() {
            return Ok(0);
        }
        let n = buf.len().min(bytes.len() - start);
        buf[..n].copy_from_slice(&bytes[start..start + n]);
        Ok(n)
    }

    /// Zeroes the bytes within the store (the length is unchanged).
    fn punch_hole(&self, offset: u64, len: u64) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::new(StoreOp::PunchHole, offset, libc::EBADF));
        }
        let mut bytes = self.bytes.write().unwrap_or_else(|e| e.into_inner());
        let size = bytes.len() as u64;
        let (a, b) = (offset.min(size), offset.saturating_add(len).min(size));
        bytes[a as usize..b as usize].fill(0);
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::new(StoreOp::Write, offset, libc::EBADF));
        }
        let end = offset
            .checked_add(buf.len() as u64)
            .and_then(|e| usize::try_from(e).ok())
            .ok_or(StoreError::new(StoreOp::Write, offset, libc::EFBIG))?;
        let mut bytes = self.bytes.write().unwrap_or_else(|e| e.into_inner());
        if bytes.len() < end {
            bytes.resize(end, 0);
        }
        bytes[end - buf.len()..end].copy_from_slice(buf);
        Ok(())
    }

    fn sync(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn is_writable(&self) -> bool {
        !self.read_only
    }

    fn name(&self) -> &str {
        "memory"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_past_end_grows_with_zeros() {
        let s = MemoryStore::new(vec![1; 10]);
        s.write_at(20, &[2; 5]).unwrap();
        let snap = s.snapshot();
        assert_eq!(snap.len(), 25);
        assert_eq!(&snap[..10], &[1; 10]);
        assert_eq!(&snap[10..20], &[0; 10]);
        assert_eq!(&snap[20..], &[2; 5]);
        let mut buf = [0u8; 8];
        assert_eq!(s.read_at(21, &mut buf).unwrap(), 4);
        assert_eq!(s.read_at(u64::MAX, &mut buf).unwrap(), 0);
    }

    #[test]
    fn read_only_refuses_writes() {
        let s = MemoryStore::read_only(vec![0; 4]);
        assert_eq!(s.write_at(0, b"x").unwrap_err().errno, libc::EBADF);
        assert!(!s.is_writable());
    }
}
