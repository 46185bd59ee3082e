//! The allocator the `tessera` binary (and the benchmarks, on both sides) run with: mimalloc,
//! asked through its plain entry points for word-aligned memory — which every mimalloc block
//! is — and through its aligned ones only for larger alignments.
//!
//! The `mimalloc` crate's allocator asks the aligned entry point for every allocation. mimalloc
//! serves that from its fast path only while the size's page has a free list ready; otherwise
//! (after a burst of frees, which it keeps on a separate list that only its plain path
//! collects) it over-allocates through its generic path. For a message's boxed guest call
//! (648 bytes) that was about 240 instructions instead of about 40 per allocation
//! (`benches/instructions.sh`, `docs/performance.md`).

use libmimalloc_sys as ffi;
use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

/// The alignment of every block mimalloc hands out, whatever its size: one machine word.
const WORD: usize = std::mem::size_of::<usize>();

/// mimalloc as the global allocator.
///
/// ```no_run
/// #[global_allocator]
/// static ALLOCATOR: tessera_host::allocator::Mimalloc = tessera_host::allocator::Mimalloc;
/// ```
pub struct Mimalloc;

// SAFETY: every block comes from mimalloc and goes back to it (`mi_free` takes blocks of both
// the plain and the aligned entry points). A layout of at most word alignment gets a plain
// block, which mimalloc aligns to a word at least; a larger alignment goes to the aligned
// entry points, which honour it. Null on exhaustion, as `GlobalAlloc` asks.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: a plain or aligned allocation of the layout's size (see the impl's note).
        unsafe {
            if layout.align() <= WORD {
                ffi::mi_malloc(layout.size()).cast()
            } else {
                ffi::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`, zeroed by mimalloc.
        unsafe {
            if layout.align() <= WORD {
                ffi::mi_zalloc(layout.size()).cast()
            } else {
                ffi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator, so from mimalloc.
        unsafe { ffi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout`; the new block keeps its
        // alignment (word alignment on the plain path, the layout's on the aligned one).
        unsafe {
            if layout.align() <= WORD {
                ffi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                ffi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks of every alignment up to a page come back aligned, hold what is written to
    /// them, keep it through a reallocation, and are zeroed when asked.
    #[test]
    fn blocks_are_aligned_and_hold_their_contents() {
        let allocator = Mimalloc;
        for align in [1, 2, 4, 8, 16, 32, 64, 4096] {
            for size in [1, 7, 24, 648, 1025, 70_000] {
                let layout = Layout::from_size_align(size, align).expect("a valid layout");
                // SAFETY: a non-zero size; the block is written within its size and freed once.
                unsafe {
                    let block = allocator.alloc(layout);
                    assert!(!block.is_null());
                    assert_eq!(block as usize % align, 0, "size {size} align {align}");
                    std::ptr::write_bytes(block, 0xA5, size);
                    let grown = allocator.realloc(block, layout, size * 2);
                    assert_eq!(
                        grown as usize % align,
                        0,
                        "realloc size {size} align {align}"
                    );
                    assert!((0..size).all(|at| *grown.add(at) == 0xA5));
                    allocator.dealloc(grown, Layout::from_size_align(size * 2, align).unwrap());
                    let zeroed = allocator.alloc_zeroed(layout);
                    assert_eq!(zeroed as usize % align, 0);
                    assert!((0..size).all(|at| *zeroed.add(at) == 0));
                    allocator.dealloc(zeroed, layout);
                }
            }
        }
    }
}
