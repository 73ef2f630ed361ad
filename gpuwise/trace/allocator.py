"""PyTorch's CUDA caching allocator, replayed: what `torch.cuda.max_memory_reserved()` reaches for a
sequence of tensor allocations and frees on one device and one stream.

The rules are those of c10/cuda/CUDACachingAllocator.cpp (DeviceCachingAllocator), read for PyTorch
2.3/2.4 and a 2.15 pre-release; unchanged in these respects since 2.1, all at the default
PYTORCH_CUDA_ALLOC_CONF (no expandable segments, no max_split_size, no garbage-collection threshold):
- allocate(0) (NativeCachingAllocator::allocate) returns a null pointer: a zero-byte storage takes no block.
- round_size: a request is rounded up to a multiple of 512 B (MIN_BLOCK), at least 512 B.
- get_pool: rounded sizes up to 1 MiB (SMALL_SIZE) come from the small pool, larger ones from the large pool;
  blocks never move between pools.
- get_free_block: best fit, the smallest cached free block of the pool at least the size (ties: the lowest
  address; here each new segment gets higher addresses than the last, which a real device does not promise).
- get_allocation_size: with no such block a new segment is cudaMalloc'ed: 2 MiB (SMALL_BUFFER) for the small
  pool, 20 MiB (LARGE_BUFFER) for requests under 10 MiB (MIN_LARGE_ALLOC), else the size rounded up to 2 MiB
  (ROUND_LARGE).
- should_split: the block is split, the request taking the low part, when what is left is at least 512 B (small
  pool) or more than 1 MiB (large pool); an unsplit remainder stays with the allocation (counted as allocated).
- free_block: a freed block merges with its free neighbours in the same segment, never across segments.
- Segments go back to CUDA only on empty_cache or when a cudaMalloc fails: with a `capacity`, a segment that would
  pass it first makes the allocator free every cached segment that is wholly free (release_cached_blocks) and
  retry; still too large, it is an out-of-memory error, though the free bytes in split segments may exceed the
  request (fragmentation). Without a capacity the reserved bytes only grow; reset_peak_memory_stats leaves the
  peak at the current reserve.
With one stream a freed block is reusable at once (record_stream's events, which delay reuse for other
streams, are not simulated: FSDP's and the collectives' side streams are outside this model).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

MIB = 1 << 20
MIN_BLOCK = 512                  # kMinBlockSize: rounding unit and smallest block
SMALL_SIZE = 1 * MIB             # kSmallSize: largest request served by the small pool
SMALL_BUFFER = 2 * MIB           # kSmallBuffer: small-pool segment
LARGE_BUFFER = 20 * MIB          # kLargeBuffer: large-pool segment for requests under MIN_LARGE_ALLOC
MIN_LARGE_ALLOC = 10 * MIB       # kMinLargeAlloc
ROUND_LARGE = 2 * MIB            # kRoundLarge: larger segments are the request rounded up to this


def round_size(n: int) -> int:
    """Bytes a request of n bytes takes from a block (round_size)."""
    return MIN_BLOCK if n < MIN_BLOCK else -(-n // MIN_BLOCK) * MIN_BLOCK


def segment_size(size: int) -> int:
    """Bytes cudaMalloc'ed for a new segment serving a rounded request (get_allocation_size)."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


class _Block:
    __slots__ = ("addr", "free", "next", "prev", "size", "small")

    def __init__(self, addr: int, size: int, small: bool):
        self.addr, self.size, self.small, self.free = addr, size, small, False
        self.prev: _Block | None = None
        self.next: _Block | None = None


@dataclass(frozen=True)
class AllocatorStats:
    allocated: int               # bytes in allocated blocks now
    reserved: int                # bytes in segments now
    peak_allocated: int          # max_memory_allocated
    peak_reserved: int           # max_memory_reserved
    segments: int


def _size_text(n: int) -> str:
    return f"{n / 2 ** 30:.2f} GiB" if n >= 2 ** 30 else f"{n / MIB:.2f} MiB"


class OutOfMemory(Exception):
    """A segment the device cannot hold, after the cached free segments were given back."""

    def __init__(self, requested: int, allocated: int, reserved: int, capacity: int):
        super().__init__(f"tried to allocate {_size_text(requested)} with {_size_text(allocated)} allocated and "
                         f"{_size_text(reserved - allocated)} reserved but unallocated of {_size_text(capacity)}")
        self.requested, self.allocated, self.reserved, self.capacity = requested, allocated, reserved, capacity

    @property
    def fragmentation(self) -> bool:
        """The tensors would fit (allocated + requested within the capacity): the free bytes are split."""
        return self.allocated + self.requested <= self.capacity


class CachingAllocator:
    """One device's caching allocator on one stream: `malloc(handle, nbytes)`, `free(handle)`; `capacity`: the
    bytes its segments may take (None: unlimited)."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity
        self._pools: dict[bool, list[tuple[int, int]]] = {True: [], False: []}   # sorted (size, addr) of free blocks
        self._free: dict[tuple[int, int], _Block] = {}                            # (addr, small) -> free block
        self._live: dict[object, _Block | None] = {}     # None: a zero-byte request
        self._next_addr = 0
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = self.segments = 0

    def stats(self) -> AllocatorStats:
        return AllocatorStats(self.allocated, self.reserved, self.peak_allocated, self.peak_reserved, self.segments)

    def reset_peak(self) -> None:
        """torch.cuda.reset_peak_memory_stats: each peak restarts at the current value."""
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved

    def has(self, handle: object) -> bool:
        return handle in self._live

    def malloc(self, handle: object, nbytes: int) -> None:
        if nbytes == 0:                              # allocate(0): a null pointer, no block
            self._live[handle] = None
            return
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        block = self._take_free(size, small) or self._new_segment(size, small)
        rest = block.size - size
        if (rest >= MIN_BLOCK) if small else (rest > SMALL_SIZE):     # should_split
            tail = _Block(block.addr + size, rest, small)
            tail.prev, tail.next = block, block.next
            if block.next is not None:
                block.next.prev = tail
            block.next, block.size = tail, size
            self._release(tail)
        self._live[handle] = block
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def free(self, handle: object) -> None:
        block = self._live.pop(handle)
        if block is None:
            return
        self.allocated -= block.size
        prev, nxt = block.prev, block.next
        if prev is not None and prev.free:          # merge with the free block before it
            self._unlist(prev)
            block.addr, block.size, block.prev = prev.addr, prev.size + block.size, prev.prev
            if prev.prev is not None:
                prev.prev.next = block
        if nxt is not None and nxt.free:            # and after it
            self._unlist(nxt)
            block.size, block.next = block.size + nxt.size, nxt.next
            if nxt.next is not None:
                nxt.next.prev = block
        self._release(block)

    def _take_free(self, size: int, small: bool) -> _Block | None:
        pool = self._pools[small]
        i = bisect.bisect_left(pool, (size, -1))
        if i == len(pool):
            return None
        block = self._free[(pool[i][1], small)]
        self._unlist(block)
        return block

    def _new_segment(self, size: int, small: bool) -> _Block:
        seg = segment_size(size)
        if self.capacity is not None and self.reserved + seg > self.capacity:
            self._release_cached()
            if self.reserved + seg > self.capacity:
                raise OutOfMemory(size, self.allocated, self.reserved, self.capacity)
        block = _Block(self._next_addr, seg, small)
        self._next_addr += seg
        self.reserved += seg
        self.segments += 1
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return block

    def _release(self, block: _Block) -> None:
        block.free = True
        bisect.insort(self._pools[block.small], (block.size, block.addr))
        self._free[(block.addr, block.small)] = block

    def _unlist(self, block: _Block) -> None:
        pool = self._pools[block.small]
        del pool[bisect.bisect_left(pool, (block.size, block.addr))]
        del self._free[(block.addr, block.small)]
        block.free = False

    def _release_cached(self) -> None:
        """release_cached_blocks: every free block that is a whole segment goes back to the device."""
        whole = [b for b in self._free.values() if b.prev is None and b.next is None]
        for b in whole:
            self._unlist(b)
            self.reserved -= b.size
            self.segments -= 1
