//! The part of SPDK's C API that [`SpdkStore`](super::SpdkStore) uses,
//! declared by hand from `spdk/{env,thread,bdev,init,rpc,log}.h` of SPDK
//! v24.09. Every call is made from the polling thread (`poller.rs`).
//!
//! Only `spdk_env_opts` is a struct whose layout Rust must know; SPDK keeps
//! it append-only and reads no further than the `opts_size` the caller
//! sets, so this v24.09 layout stays valid with later releases.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

/// `struct spdk_env_opts` (128 bytes in v24.09).
#[repr(C)]
pub struct spdk_env_opts {
    pub name: *const c_char,
    pub core_mask: *const c_char,
    pub lcore_map: *const c_char,
    pub shm_id: c_int,
    pub mem_channel: c_int,
    pub main_core: c_int,
    pub mem_size: c_int,
    pub no_pci: bool,
    pub hugepage_single_segments: bool,
    pub unlink_hugepage: bool,
    pub no_huge: bool,
    pub reserved: u32,
    pub num_pci_addr: usize,
    pub hugedir: *const c_char,
    pub pci_blocked: *mut c_void,
    pub pci_allowed: *mut c_void,
    pub iova_mode: *const c_char,
    pub base_virtaddr: u64,
    pub env_context: *mut c_void,
    pub vf_token: *const c_char,
    pub opts_size: usize,
    pub enforce_numa: bool,
    pub reserved2: [u8; 7],
}

const _: () = assert!(std::mem::size_of::<spdk_env_opts>() == 128);

/// Opaque SPDK objects.
#[repr(C)]
pub struct spdk_thread {
    _p: [u8; 0],
}
#[repr(C)]
pub struct spdk_bdev {
    _p: [u8; 0],
}
#[repr(C)]
pub struct spdk_bdev_desc {
    _p: [u8; 0],
}
#[repr(C)]
pub struct spdk_bdev_io {
    _p: [u8; 0],
}
#[repr(C)]
pub struct spdk_io_channel {
    _p: [u8; 0],
}

/// `enum spdk_bdev_io_type`: `SPDK_BDEV_IO_TYPE_FLUSH`.
pub const SPDK_BDEV_IO_TYPE_FLUSH: c_int = 4;
/// `enum spdk_bdev_event_type`: `SPDK_BDEV_EVENT_REMOVE`.
pub const SPDK_BDEV_EVENT_REMOVE: c_int = 0;
/// `SPDK_RPC_RUNTIME` of `spdk/rpc.h`: the RPC state once subsystems run.
pub const SPDK_RPC_RUNTIME: u32 = 0x2;
/// `enum spdk_log_level`: `SPDK_LOG_WARN`.
pub const SPDK_LOG_WARN: c_int = 1;

pub type spdk_bdev_io_completion_cb =
    unsafe extern "C" fn(bdev_io: *mut spdk_bdev_io, success: bool, cb_arg: *mut c_void);
pub type spdk_bdev_event_cb_t =
    unsafe extern "C" fn(kind: c_int, bdev: *mut spdk_bdev, event_ctx: *mut c_void);
pub type spdk_subsystem_init_fn = unsafe extern "C" fn(rc: c_int, ctx: *mut c_void);

unsafe extern "C" {
    pub fn spdk_env_opts_init(opts: *mut spdk_env_opts);
    pub fn spdk_env_init(opts: *const spdk_env_opts) -> c_int;
    pub fn spdk_dma_malloc(size: usize, align: usize, unused: *mut u64) -> *mut c_void;

    pub fn spdk_log_set_print_level(level: c_int);

    pub fn spdk_thread_lib_init(new_thread_fn: *const c_void, ctx_sz: usize) -> c_int;
    pub fn spdk_thread_create(name: *const c_char, cpumask: *const c_void) -> *mut spdk_thread;
    pub fn spdk_set_thread(thread: *mut spdk_thread);
    pub fn spdk_thread_poll(thread: *mut spdk_thread, max_msgs: u32, now: u64) -> c_int;
    pub fn spdk_put_io_channel(ch: *mut spdk_io_channel);

    pub fn spdk_rpc_set_state(state_mask: u32);
    pub fn spdk_subsystem_init(cb_fn: spdk_subsystem_init_fn, cb_arg: *mut c_void);
    pub fn spdk_subsystem_load_config(
        json: *mut c_void,
        json_size: isize,
        cb_fn: spdk_subsystem_init_fn,
        cb_arg: *mut c_void,
        stop_on_error: bool,
    );

    pub fn spdk_bdev_open_ext(
        bdev_name: *const c_char,
        write: bool,
        event_cb: spdk_bdev_event_cb_t,
        event_ctx: *mut c_void,
        desc: *mut *mut spdk_bdev_desc,
    ) -> c_int;
    pub fn spdk_bdev_close(desc: *mut spdk_bdev_desc);
    pub fn spdk_bdev_desc_get_bdev(desc: *mut spdk_bdev_desc) -> *mut spdk_bdev;
    pub fn spdk_bdev_get_block_size(bdev: *const spdk_bdev) -> u32;
    pub fn spdk_bdev_get_num_blocks(bdev: *const spdk_bdev) -> u64;
    pub fn spdk_bdev_get_buf_align(bdev: *const spdk_bdev) -> usize;
    pub fn spdk_bdev_io_type_supported(bdev: *mut spdk_bdev, io_type: c_int) -> bool;
    pub fn spdk_bdev_get_io_channel(desc: *mut spdk_bdev_desc) -> *mut spdk_io_channel;
    pub fn spdk_bdev_read(
        desc: *mut spdk_bdev_desc,
        ch: *mut spdk_io_channel,
        buf: *mut c_void,
        offset: u64,
        nbytes: u64,
        cb: spdk_bdev_io_completion_cb,
        cb_arg: *mut c_void,
    ) -> c_int;
    pub fn spdk_bdev_write(
        desc: *mut spdk_bdev_desc,
        ch: *mut spdk_io_channel,
        buf: *mut c_void,
        offset: u64,
        nbytes: u64,
        cb: spdk_bdev_io_completion_cb,
        cb_arg: *mut c_void,
    ) -> c_int;
    pub fn spdk_bdev_flush(
        desc: *mut spdk_bdev_desc,
        ch: *mut spdk_io_channel,
        offset: u64,
        length: u64,
        cb: spdk_bdev_io_completion_cb,
        cb_arg: *mut c_void,
    ) -> c_int;
    pub fn spdk_bdev_free_io(bdev_io: *mut spdk_bdev_io);
}
