"""The gather's row takes, with the decode threads helping: a batch's takes are cut into
pieces that the calling thread and the decode threads copy in turn (issue 33).

The copy of a batch's rows out of block memory is a chunk's bytes per chunk, the largest
share of the work per chunk left on the thread that draws batches (the main thread, or the
device node's producer thread): about 12-20 us per 116 KB chunk on two cores, most of that
thread's time at 4 and 24 steps per chunk, and on one thread it caps what more cores can
give. numpy's take runs without the GIL, so pieces of it run on as many threads as are
free. Which thread copies a piece changes nothing in the batch: the pieces are disjoint
rows of the same takes.

Helping, not handing over: the caller copies pieces too, and never waits for a decode
thread to start, since one busy decoding a block's chunks may not be free for many
milliseconds. It cuts every take of the batch into a few pieces per thread (so that a
helper arriving late still finds some), posts them on the decode pool's board, which the
decode threads look at between two chunks (`io.reads.help_board`: a busy thread joins
within a chunk's decode), asks the idle threads through the executor, takes pieces until
none is left, then withdraws the requests no thread has picked up, and waits only for the
pieces other threads are copying. All of a batch's takes go up as one job (`take_all`),
not field by field, so that a thread arriving at any time during the batch's copy finds
pieces left.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
from collections.abc import Sequence

import numpy as np

from insitubatch_nodes.io.reads.help_board import HelpBoard

MIN_PIECE_BYTES = 256 << 10  # a hand-off (a queue put, a thread's wake-up) costs ~10-20 us
PIECES_PER_THREAD = 4  # a helper that wakes late still finds pieces left


class _Pieces:
    """A batch's takes cut into pieces that any number of threads copy at once, each piece
    once (a `help_board.Job`); counts the pieces the helpers copied."""

    def __init__(self, pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        self._left = pieces[::-1]  # popped from the end: the first piece first
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._copying = 0
        self._error: BaseException | None = None
        self.helped = 0  # pieces copied by threads other than the caller

    def copy(self, helping: bool = False) -> None:
        """Copy pieces until none is left.

        Args:
            helping: whether this thread is a helper (a decode thread), not the caller.
        """
        while True:
            with self._lock:
                if not self._left:
                    return
                source, rows, out = self._left.pop()
                self._copying += 1
            try:
                np.take(source, rows, axis=0, out=out, mode="clip")
            except BaseException as err:  # raised in the caller, whichever thread copied
                self._error = self._error or err
            finally:
                with self._lock:
                    self._copying -= 1
                    self.helped += helping
                    if not self._copying:
                        self._done.notify_all()

    def help(self) -> None:
        """Copy pieces as a helper (a decode thread)."""
        self.copy(helping=True)

    def wait(self) -> None:
        """Wait until no piece is being copied (call it once the caller's `copy` returned:
        none is left then), then raise what a copy raised, if anything."""
        with self._lock:
            while self._copying:
                self._done.wait()
        if self._error is not None:
            raise self._error


class HelpedTakes:
    """`np.take(source, rows, axis=0, out=out, mode="clip")` for each of a batch's takes, in
    pieces the decode threads help with (see the module).

    Args:
        executor: the decode pool's executor (`io.reads.decode_pool.DecodePool.acquire`),
            or None to take in the calling thread alone.
        helpers: decode threads to ask at most per batch (an int >= 0).
        min_piece_bytes: the least a piece copies (a hand-off, a queue put and a thread's
            wake-up, costs 10-20 us).
        board: where the busy decode threads look for work between two chunks (the decode
            pool's `board`), or None to ask only the idle ones, through `executor`.
    """

    def __init__(
        self,
        executor: concurrent.futures.Executor | None,
        helpers: int,
        min_piece_bytes: int = MIN_PIECE_BYTES,
        board: HelpBoard | None = None,
    ) -> None:
        self._executor = executor
        self._helpers = helpers if executor is not None else 0
        self._min_piece_bytes = max(1, min_piece_bytes)
        self._board = board if self._helpers else None
        self.pieces = 0  # pieces copied so far, by any thread
        self.helped_pieces = 0  # of them, copied by the decode threads

    def take(self, source: np.ndarray, rows: np.ndarray, out: np.ndarray) -> None:
        """Copy `source`'s rows `rows` (along axis 0; any shape, in range) into `out`.

        Args:
            source: the block memory.
            rows: rows of `source`; `out` has `rows.shape` then `source.shape[1:]`.
            out: where the rows go.
        """
        self.take_all([(source, rows, out)])

    def take_all(self, takes: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        """Copy each `(source, rows, out)` as `take` does, all of them as one job.

        Args:
            takes: the takes, whose `out`s do not overlap.
        """
        most = PIECES_PER_THREAD * (self._helpers + 1)
        pieces = []
        for source, rows, out in takes:
            count = int(rows.shape[0]) if rows.ndim else 0
            cut = min(most, count, out.nbytes // self._min_piece_bytes)
            if cut <= 1 or not self._helpers:
                pieces.append((source, rows, out))
                continue
            bounds = [count * piece // cut for piece in range(cut + 1)]
            pieces += [
                (source, rows[start:stop], out[start:stop])
                for start, stop in itertools.pairwise(bounds)
            ]
        self.pieces += len(pieces)
        if len(pieces) <= 1 or not self._helpers:
            for source, rows, out in pieces:
                np.take(source, rows, axis=0, out=out, mode="clip")
            return
        assert self._executor is not None
        job = _Pieces(pieces)
        if self._board is not None:
            self._board.post(job)
        asked = []
        for _ in range(min(self._helpers, len(pieces) - 1)):
            try:
                asked.append(self._executor.submit(job.help))
            except RuntimeError:  # the pool was stopped meanwhile: copy alone
                break
        try:
            job.copy()
        finally:
            if self._board is not None:
                self._board.withdraw(job)
            for request in asked:
                request.cancel()  # one picked up finishes with the pieces it took
            job.wait()
            self.helped_pieces += job.helped
