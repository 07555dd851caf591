//! `umio_map` with `backend = "rados:<settings>"`: a Ceph RADOS object set
//! (umio-backends' `RadosStore`). libumio built without the `rados`
//! feature refuses it with `EOPNOTSUPP`.
//!
//! The settings are `key=value` pairs separated by commas: `pool` and
//! `prefix` (both required), `conf` (a ceph.conf; default librados's
//! search), `client` (the id of `client.<id>`; default `admin`),
//! `object_size` (bytes, for a new set; default 4 MiB), `queue_depth`
//! (default 32), `op_timeout` (seconds; 0 waits forever; default 30) and
//! `create` (`1`: create the set, `len` bytes long, if it does not exist).

use std::sync::Arc;

use umio_backends::Store;

use crate::boundary::Errno;

/// The settings of a `"rados:..."` backend.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RadosSpec {
    pool: String,
    prefix: String,
    conf: Option<String>,
    client: Option<String>,
    object_size: Option<u64>,
    queue_depth: Option<usize>,
    op_timeout: Option<u64>,
    create: bool,
}

impl RadosSpec {
    /// Parses the part after `rados:`; `EINVAL` for an unknown key, a bad
    /// number, a key given twice, or a missing pool or prefix.
    pub(crate) fn parse(settings: &str) -> Result<RadosSpec, Errno> {
        let einval = Errno(libc::EINVAL);
        let mut s = RadosSpec::default();
        let mut seen = Vec::new();
        for pair in settings.split(',').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').ok_or(einval)?;
            if seen.contains(&key) || value.is_empty() {
                return Err(einval);
            }
            seen.push(key);
            let number = || value.parse::<u64>().map_err(|_| einval);
            match key {
                "pool" => s.pool = value.to_string(),
                "prefix" => s.prefix = value.to_string(),
                "conf" => s.conf = Some(value.to_string()),
                "client" => s.client = Some(value.to_string()),
                "object_size" => s.object_size = Some(number()?),
                "queue_depth" => {
                    s.queue_depth = Some(usize::try_from(number()?).map_err(|_| einval)?)
                }
                "op_timeout" => s.op_timeout = Some(number()?),
                "create" => {
                    s.create = match value {
                        "0" => false,
                        "1" => true,
                        _ => return Err(einval),
                    }
                }
                _ => return Err(einval),
            }
        }
        if s.pool.is_empty() || s.prefix.is_empty() {
            return Err(einval);
        }
        Ok(s)
    }

    /// Connects and opens the set (creating it `len` bytes long if asked
    /// and absent). Errors keep librados's errno.
    #[cfg(feature = "rados")]
    pub(crate) fn open(&self, len: Option<usize>, writable: bool) -> Result<Arc<dyn Store>, Errno> {
        use umio_backends::{RadosOptions, RadosStore};
        let mut o = RadosOptions::new(&self.pool, &self.prefix).writable(writable);
        if let Some(c) = &self.conf {
            o = o.conf(c);
        }
        if let Some(c) = &self.client {
            o = o.client(c);
        }
        if let Some(n) = self.object_size {
            o = o.object_size(n);
        }
        if let Some(n) = self.queue_depth {
            o = o.queue_depth(n);
        }
        if let Some(t) = self.op_timeout {
            o = o.op_timeout(std::time::Duration::from_secs(t));
        }
        let fail = |e: umio_backends::RadosError| {
            log::debug!("umio: {e}");
            Errno(e.errno)
        };
        match RadosStore::open(&o) {
            Ok(store) => Ok(Arc::new(store)),
            Err(e) if e.errno == libc::ENOENT && self.create && e.op == "read attribute" => {
                let len = len.ok_or(Errno(libc::EINVAL))?;
                Ok(Arc::new(RadosStore::create(&o, len as u64).map_err(fail)?))
            }
            Err(e) => Err(fail(e)),
        }
    }

    /// Without the `rados` feature there is no RADOS store.
    #[cfg(not(feature = "rados"))]
    pub(crate) fn open(
        &self,
        _len: Option<usize>,
        _writable: bool,
    ) -> Result<Arc<dyn Store>, Errno> {
        Err(Errno(libc::EOPNOTSUPP))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_into_a_spec() {
        let s = RadosSpec::parse(
            "pool=umio,prefix=a/b,conf=/etc/ceph/ceph.conf,client=x,object_size=65536,\
             queue_depth=16,op_timeout=0,create=1",
        )
        .unwrap();
        assert_eq!(
            s,
            RadosSpec {
                pool: "umio".into(),
                prefix: "a/b".into(),
                conf: Some("/etc/ceph/ceph.conf".into()),
                client: Some("x".into()),
                object_size: Some(65536),
                queue_depth: Some(16),
                op_timeout: Some(0),
                create: true,
            }
        );
        assert_eq!(RadosSpec::parse("prefix=p,pool=q").unwrap().pool, "q");
    }

    #[test]
    fn bad_settings_are_einval() {
        for bad in [
            "",
            "pool=umio",
            "prefix=p",
            "pool=umio,prefix=p,size=1",
            "pool=umio,prefix=p,object_size=big",
            "pool=umio,prefix=p,object_size=-1",
            "pool=umio,prefix=p,create=yes",
            "pool=umio,prefix=p,pool=other",
            "pool=umio,prefix=",
            "pool=umio,prefix=p,conf",
        ] {
            assert_eq!(RadosSpec::parse(bad), Err(Errno(libc::EINVAL)), "{bad:?}");
        }
    }

    #[cfg(not(feature = "rados"))]
    #[test]
    fn without_the_feature_opening_is_eopnotsupp() {
        let s = RadosSpec::parse("pool=umio,prefix=p").unwrap();
        assert_eq!(
            s.open(Some(4096), true).err(),
            Some(Errno(libc::EOPNOTSUPP))
        );
    }
}
