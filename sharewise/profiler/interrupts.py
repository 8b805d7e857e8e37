"""Stopping a campaign cleanly on SIGTERM or Ctrl-C: workers gone, finished rows kept, no half-written file."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


class CampaignInterrupted(KeyboardInterrupt):
    """A campaign stopped by a signal (SIGTERM, or SIGINT from Ctrl-C); ``signum`` says which.

    A ``KeyboardInterrupt``, so that no ``except Exception`` on the way records it as a failed pair.
    ``kept`` is set by the campaign: the rows it had written (all of them whole).
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        self.kept = 0
        super().__init__(f"interrupted by {self.name}")

    @property
    def exit_code(self) -> int:
        """The shell's code for death by this signal: 128 + its number (130 for Ctrl-C, 143 for SIGTERM)."""
        return 128 + self.signum


class StopSignals:
    """While active, SIGTERM and SIGINT raise ``CampaignInterrupted`` in the main thread.

    Inside ``deferred()`` (a row being written) the signal is held and raised when the block ends, so
    what a campaign writes is never cut in half by the stop. Outside the main thread (signals cannot be
    handled there) it does nothing.

    Example::

        with StopSignals() as stops:
            for row in rows:
                with stops.deferred():
                    write(row)
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self._previous: dict[int, object] = {}
        self._depth = 0
        self._pending: int | None = None

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def _handle(self, signum, frame) -> None:
        if self._depth:
            self._pending = signum
            return
        raise CampaignInterrupted(signum)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        if not self._depth and self._pending is not None:
            signum, self._pending = self._pending, None
            raise CampaignInterrupted(signum)
