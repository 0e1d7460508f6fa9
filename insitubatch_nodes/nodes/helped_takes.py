"""The gather's row takes, with the decode threads helping: each take is cut into pieces
that the calling thread and idle decode threads copy in turn (issue 33).

The copy of a batch's rows out of block memory is a chunk's bytes per chunk, the largest
share of the work per chunk left on the thread that draws batches (the main thread, or the
device node's producer thread): about 20 us per 116 KB chunk on two cores, most of that
thread's time at 4 and 24 steps per chunk, and on one thread it caps what more cores can
give. numpy's take runs without the GIL, so pieces of it run on as many threads as are
free. Which thread copies a piece changes nothing in the batch: the pieces are disjoint
rows of the same take.

Helping, not handing over: the caller copies pieces too, and never waits for a decode
thread to start, since one busy decoding a block's chunks may not be free for many
milliseconds. It asks each decode thread for help once, cuts the take into a few pieces
per thread (so that a helper waking late still finds some), takes pieces until none is
left, then withdraws the requests no thread has picked up, and waits only for the pieces
other threads are copying. When the decode threads are busy (decoding is what limits), the
caller copies everything, as before; when they wait for room to read ahead (the drawing
thread is what limits), they share its copy.
"""

from __future__ import annotations

import concurrent.futures

import numpy as np

MIN_PIECE_BYTES = 256 << 10  # a hand-off (a queue put, a thread's wake-up) costs ~10-20 us
PIECES_PER_THREAD = 4  # a helper that wakes late still finds pieces left


class HelpedTakes:
    """`np.take(source, rows, axis=0, out=out, mode="clip")`, in pieces the decode threads
    help with (see the module).

    Args:
        executor: the decode pool's executor (`io.reads.decode_pool.DecodePool.acquire`),
            or None to take in the calling thread alone.
        helpers: decode threads to ask at most per take (an int >= 0).
        min_piece_bytes: the least a piece copies (a hand-off, a queue put and a thread's
            wake-up, costs 10-20 us).
    """

    def __init__(
        self,
        executor: concurrent.futures.Executor | None,
        helpers: int,
        min_piece_bytes: int = MIN_PIECE_BYTES,
    ) -> None:
        self._executor = executor
        self._helpers = helpers if executor is not None else 0
        self._min_piece_bytes = max(1, min_piece_bytes)

    def take(self, source: np.ndarray, rows: np.ndarray, out: np.ndarray) -> None:
        """Copy `source`'s rows `rows` (along axis 0; any shape, in range) into `out`.

        Args:
            source: the block memory.
            rows: rows of `source`; `out` has `rows.shape` then `source.shape[1:]`.
            out: where the rows go.
        """
        count = int(rows.shape[0]) if rows.ndim else 0
        most = PIECES_PER_THREAD * (self._helpers + 1)
        pieces = min(most, count, out.nbytes // self._min_piece_bytes)
        if pieces <= 1:
            np.take(source, rows, axis=0, out=out, mode="clip")
            return
        assert self._executor is not None
        bounds = [count * piece // pieces for piece in range(pieces + 1)]
        left = list(range(pieces))

        def copy_pieces() -> None:
            while True:
                try:
                    piece = left.pop()  # atomic: each piece is copied once
                except IndexError:
                    return
                start, stop = bounds[piece], bounds[piece + 1]
                np.take(source, rows[start:stop], axis=0, out=out[start:stop], mode="clip")

        asked = []
        for _ in range(min(self._helpers, pieces - 1)):
            try:
                asked.append(self._executor.submit(copy_pieces))
            except RuntimeError:  # the pool was stopped meanwhile: copy alone
                break
        copy_pieces()
        for request in asked:
            if not request.cancel():  # picked up: it may be copying a piece
                request.result()
